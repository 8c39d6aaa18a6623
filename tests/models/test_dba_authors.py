"""DBA's authors' form (models/dba_authors.py): its layers hand the compressed sequence C
on as the next DBA layer's Z, in a backbone of its own.

A ZCarryBlock keeps a Block's parameters and state_dict keys, returns (x, z) and is the
manual pre-norm computation with the mixer's own (x, C); the model builder picks
DBAuthorsBackbone for a config whose mixers carry Z (the plain Backbone otherwise), which
chains the carriers (only the first keeps a learned Z) and threads z past plain blocks.
"""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.models.backbone import Backbone
from weirdnet.models.blocks import Block, build_mixer
from weirdnet.models.config import BackboneConfig
from weirdnet.models.dba_authors import (
    DBAuthorsBackbone,
    ZCarryBlock,
    backbone_class,
    build_backbone,
    carries_z,
    link_z_carriers,
    make_block,
)

OPTIONS = {"form": "authors", "heads": 2, "d_p": 4, "d_in": 4}


def config(pattern="dba", short_conv=0, z_carry=True):
    return BackboneConfig(dim=8, depth=3, pattern=pattern, vocab_size=11, max_len=32,
                          short_conv=short_conv,
                          mixer_options={"dba": {**OPTIONS, "z_carry": z_carry}})


def block(name, cfg, seed=0):
    torch.manual_seed(seed)
    return make_block(build_mixer(name, cfg), cfg).double()


def test_make_block_picks_the_type_from_the_mixer():
    cfg = config("dba,softmax")
    assert type(block("dba", cfg)) is ZCarryBlock and carries_z(block("dba", cfg).mixer)
    assert type(block("softmax", cfg)) is Block
    plain = config(z_carry=False)
    assert type(block("dba", plain)) is Block and not carries_z(block("dba", plain).mixer)


def test_a_z_carrying_block_keeps_the_state_dict_keys_of_a_block():
    cfg = config()
    carrier, mixer = block("dba", cfg), build_mixer("dba", cfg)
    assert set(carrier.state_dict()) == set(Block(mixer, cfg).state_dict())


@pytest.mark.parametrize("short_conv", [0, 3])
@pytest.mark.parametrize("length", [1, 2, 3, 7])
def test_forward_is_the_manual_block_with_the_mixers_own_z(short_conv, length):
    cfg = config(short_conv=short_conv)
    b = block("dba", cfg)
    g = torch.Generator().manual_seed(length)
    x = torch.randn(2, length, 8, generator=g, dtype=torch.float64)
    z_in = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
    mask = torch.ones(2, length, dtype=torch.bool)
    mask[1, length - 1:] = length == 1  # row 1 loses its last token (unless L = 1)
    for z in (None, z_in):
        got, z_out = b(x, mask, z)
        h = b.norm_mix(x)
        if b.conv is not None:
            h = b.conv(h, mask)[0]
        y, want_z = b.mixer(h, mask, z=z, return_z=True)
        h = x + y
        want = h + b.ffn(b.norm_ffn(h))
        assert rel_err(got[mask], want[mask]) <= 1e-12 and torch.equal(z_out, want_z)
        assert not got.isnan().any()


def test_the_builder_picks_the_backbone_from_the_mixers():
    assert backbone_class(config("dba,softmax")) is DBAuthorsBackbone
    assert backbone_class(config("softmax")) is Backbone
    assert backbone_class(config(z_carry=False)) is Backbone
    torch.manual_seed(0)
    built = build_backbone(config("dba,softmax,dba"))
    assert type(built) is DBAuthorsBackbone
    torch.manual_seed(0)  # the same weights as a plain backbone built from the same seed
    plain = Backbone(config("dba,softmax,dba"))
    assert set(built.state_dict()) == set(plain.state_dict()) - {"blocks.2.mixer.z"}
    assert all(torch.equal(t, plain.state_dict()[k]) for k, t in built.state_dict().items())


def test_z_passes_plain_blocks_unchanged_to_the_next_carrier():
    """dba, softmax, dba: the second DBA layer's Z is the first's C, the softmax block
    between them runs as a plain block."""
    torch.manual_seed(0)
    model = build_backbone(config("dba,softmax,dba")).double()
    tokens = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(1))
    first, middle, last = model.blocks
    h = model.embed_inputs(tokens, None)
    h, z = first(h, None)
    h = middle(h)
    h, _ = last(h, None, z)
    assert torch.equal(model(tokens), model.norm(h))


def test_link_z_carriers_leaves_a_learned_z_only_in_the_first():
    cfg = config("dba,softmax,dba")
    blocks = [block(name, cfg) for name in ("dba", "softmax", "dba")]
    assert link_z_carriers(blocks)
    assert blocks[0].mixer.z is not None and blocks[2].mixer.z is None
    assert not link_z_carriers([block("softmax", cfg)])
