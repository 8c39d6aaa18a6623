"""The Z-carrying block (models/dba_authors.py): DBA's authors' form hands its compressed
sequence C on as the next DBA layer's Z.

A ZCarryBlock keeps a Block's parameters and state_dict keys, returns (x, z) and is the
manual pre-norm computation with the mixer's own (x, C); ``carry`` threads z through a
plain block unchanged; the backbone chains the carriers (only the first keeps a learned
Z) and refuses doc_ids at a carrier (it unpacks packed documents before).
"""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.models.blocks import Block, build_mixer
from weirdnet.models.config import BackboneConfig
from weirdnet.models.dba_authors import ZCarryBlock, carries_z, link_z_carriers, make_block

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
    assert type(block("dba", cfg)) is ZCarryBlock and block("dba", cfg).carries_z
    assert type(block("softmax", cfg)) is Block and not block("softmax", cfg).carries_z
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
        assert b.carry(x, z, mask, None, None, None)[1].equal(z_out)


def test_a_plain_block_passes_z_through_and_a_carrier_refuses_doc_ids():
    cfg = config("softmax")
    plain, z = block("softmax", cfg), torch.randn(2, 4, 8, dtype=torch.float64)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    out, z_out = plain.carry(x, z, None, None, None, None)
    assert z_out is z and torch.equal(out, plain(x))
    with pytest.raises(ValueError, match="takes no doc_ids"):
        block("dba", config()).carry(x, None, None, None, None, torch.zeros(2, 5))


def test_link_z_carriers_leaves_a_learned_z_only_in_the_first():
    cfg = config("dba,softmax,dba")
    blocks = [block(name, cfg) for name in ("dba", "softmax", "dba")]
    assert link_z_carriers(blocks)
    assert blocks[0].mixer.z is not None and blocks[2].mixer.z is None
    assert not link_z_carriers([block("softmax", cfg)])
