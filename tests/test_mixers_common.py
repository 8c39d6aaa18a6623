"""The one mixer interface, checked for every registered mixer and form.

Each mixer is built by name (``weirdnet.layers.build``) in every form it supports
(causal and/or bidirectional) and must: map (B, L, D) to (B, L, D) with finite values
and gradients; ignore right padding at real tokens; never see the future when causal;
decode token by token exactly like its full pass; and reject bad input with ValueError.
Checks run in float64, so every tolerance is tight.
"""

import pytest
import torch

from weirdnet.layers import Mixer, available, build

REQUIRED = {"weird", "ps", "relation", "dba", "softmax", "linear", "linformer", "local"}
B, L, D = 2, 23, 16


def _build(name: str, causal: bool):
    torch.manual_seed(0)
    return build(name, D, causal=causal).double().eval()


def _forms():
    """(name, causal) for every form each registered mixer can be built in."""
    forms = []
    for name in available():
        for causal in (True, False):
            try:
                build(name, D, causal=causal)
            except ValueError:
                continue
            forms.append(pytest.param(name, causal, id=f"{name}-{'causal' if causal else 'bi'}"))
    return forms


FORMS = _forms()
CAUSAL_FORMS = [p for p in FORMS if p.values[1]]


def _x(length=L, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, length, D, generator=g, dtype=torch.float64)


def test_required_mixers_are_registered():
    assert REQUIRED <= set(available())


def test_every_mixer_can_be_built_in_some_form():
    built = {p.values[0] for p in FORMS}
    assert set(available()) == built


@pytest.mark.parametrize("name,causal", FORMS)
def test_shapes_values_and_gradients(name, causal):
    layer = _build(name, causal)
    x = _x().requires_grad_()
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, -5:] = False
    y = layer(x, mask)
    assert y.shape == (B, L, D) and y.dtype == torch.float64
    assert torch.isfinite(y).all()
    y[mask].square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for pname, p in layer.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), pname


@pytest.mark.parametrize("name,causal", FORMS)
def test_right_padding_never_changes_real_outputs(name, causal):
    layer = _build(name, causal)
    x = _x()
    mask = torch.ones(B, L, dtype=torch.bool)
    padded = torch.cat([x, 1e3 * _x(7, seed=2)], 1)  # garbage in the padded slots
    padded_mask = torch.cat([mask, torch.zeros(B, 7, dtype=torch.bool)], 1)
    with torch.no_grad():
        want = layer(x, mask)
        got = layer(padded, padded_mask)[:, :L]
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name,causal", CAUSAL_FORMS)
def test_causal_forms_never_see_the_future(name, causal):
    layer = _build(name, causal)
    x, t = _x(), 11
    changed = x.clone()
    changed[:, t:] = 50 * _x(seed=3)[:, t:]
    with torch.no_grad():
        assert torch.allclose(layer(x)[:, :t], layer(changed)[:, :t], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name,causal", CAUSAL_FORMS)
def test_decoding_equals_the_full_pass(name, causal):
    layer = _build(name, causal)
    x = _x()
    with torch.no_grad():
        full = layer(x)
        cache = layer.init_cache(B)
        prompt = layer(x[:, :9], cache=cache)
        steps = [layer.step(x[:, t], cache) for t in range(9, L)]
    decoded = torch.cat([prompt, torch.stack(steps, 1)], 1)
    assert torch.allclose(decoded, full, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name,causal", CAUSAL_FORMS)
def test_a_reordered_cache_continues_the_chosen_sequences(name, causal):
    """Beam search: ``cache.reorder(index)`` keeps, drops and repeats sequences; decoding
    then continues each chosen sequence exactly as its own full pass (padding included)."""
    layer = _build(name, causal)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, L, D, generator=g, dtype=torch.float64)
    mask = torch.ones(3, L, dtype=torch.bool)
    mask[1, :4] = False                                  # a left-padded prompt
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        full = layer(x[index], mask[index])
        cache = layer.init_cache(3)
        prompt = layer(x[:, :9], mask[:, :9], cache=cache)[index]
        cache.reorder(index)
        assert cache.batch_size == 4
        rest = layer(x[index, 9:], mask[index, 9:], cache=cache)
    decoded = torch.cat([prompt, rest], 1)
    real = mask[index]
    assert torch.allclose(decoded[real], full[real], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name,causal", FORMS)
def test_every_mixer_keeps_the_one_contract(name, causal):
    """A Mixer: forward returns a tensor, with or without a cache (advanced in place)."""
    layer = _build(name, causal)
    assert isinstance(layer, Mixer)
    if not causal:
        return
    with torch.no_grad():
        cache = layer.init_cache(B)
        out = layer(_x(5), cache=cache)
        assert isinstance(out, torch.Tensor) and out.shape == (B, 5, D)
        assert layer.step(_x(1)[:, 0], cache).shape == (B, D)
        if hasattr(cache, "position"):
            assert cache.position == 6


@pytest.mark.parametrize("name,causal", CAUSAL_FORMS)
def test_a_cache_of_another_mixer_or_batch_is_refused(name, causal):
    layer = _build(name, causal)
    other = _build("softmax" if name != "softmax" else "linear", True)
    with pytest.raises(ValueError, match="cache must come from"):
        layer(_x(), cache=other.init_cache(B))
    with pytest.raises(ValueError, match="cache was made for batch_size=3"):
        layer(_x(), cache=layer.init_cache(3))


@pytest.mark.parametrize("name,causal", [p for p in FORMS if not p.values[1]])
def test_bidirectional_forms_refuse_a_cache(name, causal):
    layer = _build(name, causal)
    with pytest.raises(ValueError, match="causal"):
        layer.init_cache(B)
    with pytest.raises(ValueError, match="causal"):
        layer(_x(), cache=object())


@pytest.mark.parametrize("name,causal", FORMS)
def test_bad_input_is_a_value_error(name, causal):
    layer = _build(name, causal)
    with pytest.raises(ValueError):
        layer(torch.randn(B, L, D + 1, dtype=torch.float64))
    with pytest.raises(ValueError):
        layer(torch.randn(L, D, dtype=torch.float64))
    with pytest.raises(ValueError):
        layer(torch.ones(B, L, D, dtype=torch.long))
    with pytest.raises(ValueError):
        layer(_x(), torch.ones(B, L + 1, dtype=torch.bool))



@pytest.mark.parametrize("name,causal", FORMS)
def test_an_empty_sequence_gives_an_empty_output(name, causal):
    """L = 0 (issue 35): every mixer returns an empty (B, 0, D) output, with or without a
    mask, and backward through it works (zero-sized gradients)."""
    layer = _build(name, causal)
    x = _x(0).requires_grad_()
    for mask in (None, torch.ones(B, 0, dtype=torch.bool)):
        y = layer(x, mask)
        assert y.shape == (B, 0, D) and y.dtype == torch.float64
        y.sum().backward()
    assert x.grad is None or x.grad.shape == (B, 0, D)


@pytest.mark.parametrize("name,causal", CAUSAL_FORMS)
def test_an_empty_chunk_leaves_the_cache_where_it_was(name, causal):
    """A cached forward of 0 tokens returns (B, 0, D) and does not advance the cache:
    decoding then continues exactly as without it."""
    layer = _build(name, causal)
    x = _x()
    with torch.no_grad():
        want = layer(x)
        cache = layer.init_cache(B)
        first = layer(x[:, :9], cache=cache)
        empty = layer(x[:, :0], cache=cache)
        if hasattr(cache, "position"):
            assert cache.position == 9
        rest = layer(x[:, 9:], cache=cache)
    assert empty.shape == (B, 0, D)
    assert torch.allclose(torch.cat([first, rest], 1), want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", available())
def test_an_unknown_option_is_a_one_line_value_error(name):
    """``build(name, dim, bogus=1)`` (issue 35): a ValueError naming the unknown option and
    the options the mixer accepts, not a TypeError from its constructor."""
    with pytest.raises(ValueError, match=r"unknown option 'bogus' for mixer") as info:
        build(name, 64, bogus=1)
    message = str(info.value)
    assert "\n" not in message and "accepted options:" in message
