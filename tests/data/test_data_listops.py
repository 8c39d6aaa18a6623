"""LRA ListOps: generator statistics vs the official distribution, TSV format, reader, errors.

Reference numbers: LRA's ``listops.py`` logic (re-run here from its source, 24K samples)
gives a mean length of 1036 tokens (std 394; length = digits + operators + "]", LRA's own
measure), lengths 501-1999, and labels 0 and 9 at about 17% each (MIN and MAX pile up
at the extremes); this generator gave 1034 and 17.0%/16.9% on 96K samples.
"""

import random
from pathlib import Path

import numpy as np
import pytest
import torch

import weirdnet.data as wd
from weirdnet.cli import main
from weirdnet.data.lra import listops as lo
from weirdnet.data.lra.cache import build_dir_atomically


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def sample():
    """3000 generated samples (about 2 s): enough for a 5-sigma check of the statistics."""
    return lo.generate_listops(3000, seed=0)


def _reference_value(source: str) -> int:
    """Evaluate an LRA Source string independently: a stack over the parenthesis-free tokens,
    MED with numpy's median as LRA does."""
    ops = {"[MIN": min, "[MAX": max, "[MED": lambda v: int(np.median(v)),
           "[SM": lambda v: int(np.sum(v)) % 10}
    stack: list = []
    for tok in source.replace("(", " ").replace(")", " ").split():
        if tok in ops:
            stack.append([tok])
        elif tok == "]":
            op, *args = stack.pop()
            value = ops[op](args)
            if not stack:
                return value
            stack[-1].append(value)
        else:
            stack[-1].append(int(tok))
    raise AssertionError("unbalanced expression")


def _shape(source: str) -> tuple[int, int, int]:
    """(maximum operator nesting depth, fewest and most arguments of an operator)."""
    depth = deepest = 0
    counts, fewest, most = [], 99, 0
    for tok in source.replace("(", " ").replace(")", " ").split():
        if tok.startswith("["):
            depth += 1
            deepest = max(deepest, depth)
            counts.append(0)
        elif tok == "]":
            depth -= 1
            n = counts.pop()
            fewest, most = min(fewest, n), max(most, n)
            if counts:
                counts[-1] += 1
        else:
            counts[-1] += 1
    return deepest, fewest, most


def test_length_statistics_match_lra(sample):
    lengths = np.array([len(lo.encode(source)) for source, _ in sample])
    # standard error of the mean: 394 / sqrt(3000) = 7.2 tokens; +-5 sigma around 1036
    assert 1000 < lengths.mean() < 1072
    assert lengths.min() >= 501 and lengths.max() <= 1999
    assert lengths.min() < 540 and lengths.max() > 1900  # the whole window is used


def test_label_statistics_match_lra(sample):
    share = np.bincount([label for _, label in sample], minlength=10) / len(sample)
    # standard error of a 17% share at n=3000: 0.7 points; +-4 sigma
    assert 0.14 < share[0] < 0.20 and 0.14 < share[9] < 0.20
    assert ((share[1:9] > 0.05) & (share[1:9] < 0.12)).all()


def test_labels_are_the_values_and_trees_obey_the_limits(sample):
    assert len({source for source, _ in sample}) == len(sample)  # deduplicated
    for source, label in sample[:300]:
        assert label == _reference_value(source)
        deepest, fewest, most = _shape(source)
        assert deepest <= 9 and fewest >= 2 and most <= 10  # depth-10 nodes are digits


def test_lra_string_format_and_operators():
    assert lo.to_lra_string(("[MAX", (2, 9))) == "( ( ( [MAX 2 ) 9 ) ] )"
    nested = ("[MAX", (2, ("[SM", (3, 4))))
    assert lo.to_lra_string(nested) == "( ( ( [MAX 2 ) ( ( ( [SM 3 ) 4 ) ] ) ) ] )"
    assert lo.evaluate(nested) == 7
    rng = random.Random(0)
    for _ in range(500):
        values = tuple(rng.randrange(10) for _ in range(rng.randint(2, 10)))
        assert lo.evaluate(("[MED", values)) == int(np.median(values))
        assert lo.evaluate(("[SM", values)) == sum(values) % 10
        assert lo.evaluate(("[MIN", values)) == min(values)


def test_generator_is_seeded():
    assert lo.generate_listops(20, seed=1) == lo.generate_listops(20, seed=1)
    assert lo.generate_listops(20, seed=1) != lo.generate_listops(20, seed=2)


def test_tsv_round_trip(tmp_path):
    paths = lo.write_listops_files(tmp_path, n_train=30, n_val=5, n_test=5, seed=3)
    rows = lo.generate_listops(40, seed=3)
    assert paths["train"].read_text().splitlines()[0] == "Source\tTarget"
    start = 0
    for split, size in (("train", 30), ("val", 5), ("test", 5)):
        data = lo.read_listops_tsv(paths[split])
        assert len(data) == size
        for i, (source, label) in enumerate(rows[start:start + size]):
            item = data[i]
            assert item["label"] == label
            assert item["tokens"].dtype == torch.int64
            assert lo.decode(item["tokens"]) == " ".join(source.replace("(", " ")
                                                         .replace(")", " ").split())
        start += size


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


def test_reader_tokenises_hand_written_rows(tmp_path):
    path = _write(tmp_path / "basic_test.tsv",
                  "Source\tTarget\r\n"
                  "( ( ( [MAX 2 ) 9 ) ] )\t9\r\n"
                  "\n"
                  "[SM 3 4 ]\t7\n"
                  "( ( [MIN ( ( [MED 0 ) ] ) ) ] )\t0\n")
    data = lo.read_listops_tsv(path)
    assert [data[i]["tokens"].tolist() for i in range(3)] == [
        [12, 3, 10, 15], [14, 4, 5, 15], [11, 13, 1, 15, 15]]
    assert [data[i]["label"] for i in range(3)] == [9, 7, 0]
    assert data[-1]["label"] == 0
    assert data.info == wd.DatasetInfo(task="classification", vocab_size=16, num_classes=10,
                                       max_len=2000, pad_id=0)
    short = lo.read_listops_tsv(path, max_len=2)
    assert short[2]["tokens"].tolist() == [11, 13] and short.info.max_len == 2
    assert lo.VOCAB[12] == "[MAX" and lo.VOCAB[1] == "0" and lo.VOCAB[15] == "]"


@pytest.mark.parametrize("body, line, words", [
    ("( [MAX 2 ) ]\t2\n", 1, "header"),
    ("Source\tTarget\n[MAX 2 ]\t2\n[MIN 3 4 ]\n", 3, "2 tab-separated fields"),
    ("Source\tTarget\n[MAX 2 ]\t2\textra\n", 2, "2 tab-separated fields"),
    ("Source\tTarget\n[MAX 2 ]\t2\n( [FIRST 2 ) ]\t2\n", 3, "unknown token '[FIRST'"),
    ("Source\tTarget\n[MAX 12 ]\t2\n", 2, "unknown token '12'"),
    ("Source\tTarget\n[MAX 2 ]\t10\n", 2, "not an integer 0-9"),
    ("Source\tTarget\n[MAX 2 ]\t-1\n", 2, "not an integer 0-9"),
    ("Source\tTarget\n[MAX 2 ]\tx\n", 2, "not an integer 0-9"),
    ("", 1, "header"),
])
def test_bad_files_name_the_file_and_line(tmp_path, body, line, words):
    path = _write(tmp_path / "basic_train.tsv", body)
    with pytest.raises(ValueError) as info:
        lo.read_listops_tsv(path)
    assert f"{path}:{line}:" in str(info.value) and words in str(info.value)


def test_unknown_token_found_in_a_large_file(tmp_path):
    rows = lo.generate_listops(30, seed=4)
    lines = [f"{source}\t{label}" for source, label in rows]
    lines[21] = lines[21].replace("[SM", "[SUM", 1) if "[SM" in lines[21] else "[SUM 1 ]\t1"
    path = _write(tmp_path / "basic_val.tsv", "Source\tTarget\n" + "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="unknown token '\\[SUM'") as info:
        lo.read_listops_tsv(path)
    assert f"{path}:23:" in str(info.value)


@pytest.mark.parametrize("layout", [".", "listops-1000", "lra_release/listops-1000"])
def test_registry_reads_official_layouts(tmp_path, layout):
    folder = tmp_path / "data" / layout
    lo.write_listops_files(folder, n_train=4, n_val=3, n_test=2, seed=5)
    for split, size in (("train", 4), ("val", 3), ("test", 2)):
        data = wd.get("listops", split, root=tmp_path / "data", max_len=100)
        assert len(data) == size and data.info.max_len == 100
        assert all(len(data[i]["tokens"]) <= 100 for i in range(size))


def test_missing_files_say_how_to_get_them(tmp_path):
    with pytest.raises(wd.DataMissingError) as info:
        wd.get("listops", "val", root=tmp_path)
    message = str(info.value)
    assert "https://storage.googleapis.com/long-range-arena/lra_release.gz" in message
    assert str(tmp_path / "lra_release" / "listops-1000" / "basic_val.tsv") in message
    assert "weirdnet data build listops" in message


def test_generated_cache_is_keyed_and_reused(tmp_path):
    options = {"n_train": 12, "n_val": 3, "n_test": 2, "seed": 7}
    train = wd.get("listops", "train", **options)
    assert len(train) == 12 and len(wd.get("listops", "test", **options)) == 2
    generated = tmp_path / "cache" / "listops" / "generated"
    (folder,) = generated.iterdir()
    assert folder.name.startswith("seed7-n12-3-2-")
    assert sorted(p.name for p in folder.iterdir()) == [
        "basic_test.tsv", "basic_train.tsv", "basic_val.tsv"]
    stamp = (folder / "basic_train.tsv").stat().st_mtime_ns
    again = wd.get("listops", "train", **options)
    assert (folder / "basic_train.tsv").stat().st_mtime_ns == stamp
    assert torch.equal(again[5]["tokens"], train[5]["tokens"])
    wd.get("listops", "val", **{**options, "seed": 8})
    wd.get("listops", "val", **{**options, "max_depth": 9})
    assert len(list(generated.iterdir())) == 3
    assert not [p for p in generated.iterdir() if p.name.startswith(".")]


def test_atomic_build_leaves_nothing_on_failure(tmp_path):
    def fail(folder: Path) -> None:
        (folder / "basic_train.tsv").write_text("half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        build_dir_atomically(tmp_path / "set", fail)
    assert list(tmp_path.iterdir()) == []


def _cli(*argv: str) -> int:
    return main(["data", *argv])


def test_cli_generate_and_show(tmp_path, capsys):
    out = str(tmp_path / "lo")
    assert _cli("build", "listops", "--out", out, "--n", "6", "--n-val", "2",
                "--n-test", "3", "--seed", "4", "--no-progress") == 0
    assert "wrote 11 listops samples" in capsys.readouterr().out
    assert [len(wd.get("listops", s, root=out)) for s in ("train", "val", "test")] == [6, 2, 3]
    assert _cli("show", "listops", "--root", out, "--split", "test", "--n", "2") == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == 2 and shown[1].startswith("#1  label ")
    assert _cli("build", "listops", "--out", out, "--n", "1") == 2  # not overwritten
    assert _cli("build", "listops", "--out", str(tmp_path / "x"), "--workers", "2") == 2
    assert "pathfinder only" in capsys.readouterr().err


def test_progress_counting_passes_rows_through_when_the_bar_redraws():
    """tqdm.update returns True when it redraws; the rows must still reach the writer."""
    from weirdnet.data.lra.listops import _counted

    class RedrawingBar:
        count = 0

        def update(self, n):
            self.count += n
            return True

    bar = RedrawingBar()
    rows = [("[MAX 1 2 ]", 2), ("[MIN 3 4 ]", 3)]
    assert list(_counted(iter(rows), bar)) == rows and bar.count == 2
