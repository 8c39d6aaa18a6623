"""Shared mixer settings are declared where each mixer is registered (``register(name,
shared=...)``), never read from its signature: a declared setting the constructor does
not take (a renamed parameter), a shared setting it takes without declaring it, or a
declared name that is not a shared setting is a ValueError naming the mixer and the
setting when a backbone builds it."""

import pytest
import torch

from weirdnet.layers import base
from weirdnet.layers.registry import (
    MIXERS,
    SHARED,
    SHARED_SETTINGS,
    available,
    register,
    shared_settings,
)
from weirdnet.models.backbone import Backbone
from weirdnet.models.blocks import mixer_options
from weirdnet.models.config import BackboneConfig


@pytest.mark.parametrize("name", available())
def test_every_mixer_declares_what_it_takes(name):
    declared = shared_settings(name)
    assert set(declared) <= set(SHARED_SETTINGS)


def test_the_backbone_passes_only_the_declared_settings():
    cfg = BackboneConfig(dim=16, depth=3, pattern="weird", vocab_size=5, max_len=32,
                         bias=False, positions="rope", attn_dropout=0.1, heads=2)
    assert mixer_options("weird", cfg) == {"max_len": 32, "bias": False, "n_layers": 3}
    assert mixer_options("softmax", cfg) == {"heads": 2, "bias": False, "dropout": 0.1,
                                             "rope": True, "rope_theta": 10000.0}


class _Renamed(base.Mixer):
    """Declares max_len but its constructor calls it max_length."""

    def __init__(self, dim, *, causal=True, max_length=16):
        super().__init__()
        self.dim, self.causal = dim, causal


class _Undeclared(base.Mixer):
    """Takes heads but does not declare it: the backbone's heads would be dropped."""

    def __init__(self, dim, *, causal=True, heads=1):
        super().__init__()
        self.dim, self.causal = dim, causal


class _NotShared(base.Mixer):
    def __init__(self, dim, *, causal=True, window=4):
        super().__init__()
        self.dim, self.causal = dim, causal


@pytest.fixture
def registered():
    names = {"test-renamed": (_Renamed, ("max_len",)), "test-undeclared": (_Undeclared, ()),
             "test-not-shared": (_NotShared, ("window",))}
    for name, (cls, shared) in names.items():
        register(name, shared=shared)(cls)
    yield
    for name in names:
        MIXERS._entries.pop(name), MIXERS._objects.pop(name), SHARED.pop(name)


@pytest.mark.parametrize("name, message", [
    ("test-renamed", r"mixer 'test-renamed' declares the shared setting 'max_len' but its "
                     r"constructor takes no 'max_len'"),
    ("test-undeclared", r"mixer 'test-undeclared' takes the shared setting\(s\) 'heads' but "
                        r"does not declare them"),
    ("test-not-shared", r"mixer 'test-not-shared' declares 'window' in its shared settings, "
                        r"which is not a shared setting"),
])
def test_a_wrong_declaration_fails_loudly_when_a_backbone_is_built(registered, name, message):
    cfg = BackboneConfig(dim=8, depth=1, pattern=name, vocab_size=5, max_len=16)
    with pytest.raises(ValueError, match=message):
        Backbone(cfg)


def test_a_renamed_parameter_of_a_builtin_mixer_fails_loudly(monkeypatch):
    available()  # the built-in mixers registered
    monkeypatch.setitem(SHARED, "weird", ("max_len", "bias", "n_layer"))
    with pytest.raises(ValueError, match="'weird' declares 'n_layer'"):
        Backbone(BackboneConfig(dim=8, depth=1, pattern="weird", vocab_size=5, max_len=16))
    torch.manual_seed(0)  # the other mixers are untouched
    Backbone(BackboneConfig(dim=8, depth=1, pattern="softmax", vocab_size=5, max_len=16))
