"""LRA Pathfinder / Path-X: the snakes2 re-implementation, the official layout, the reader.

Small 32x32 sets (a dozen images, about 25 ms each) are written to tmp_path by the tests.
"""

import dataclasses
import filecmp
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import weirdnet.data as wd
from weirdnet.cli import main
from weirdnet.data.lra import pathfinder as pf
from weirdnet.data.lra import pathfinder_gen as gen

PIL = pytest.importorskip("PIL.Image")

N_IMAGES = 12  # split 10/1/1


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def official(tmp_path_factory) -> Path:
    """A 32x32 set in the official layout: 12 images in batches of 5 (imgs/0..2)."""
    out = tmp_path_factory.mktemp("pf32")
    gen.write_pathfinder(out, resolution=32, n=N_IMAGES, seed=0, workers=1, batch_size=5)
    return out


@pytest.fixture
def copy(official, tmp_path) -> Path:
    """A private copy of the official-layout set, to damage."""
    return Path(shutil.copytree(official, tmp_path / "copy"))


# ---------------------------------------------------------------------------- generator

def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    yy, xx = np.mgrid[-radius:radius + 1, -radius:radius + 1]
    out = np.zeros_like(mask)
    padded = np.pad(mask, radius)
    h, w = mask.shape
    for dy, dx in zip(yy[yy ** 2 + xx ** 2 <= radius ** 2], xx[yy ** 2 + xx ** 2 <= radius ** 2]):
        out |= padded[radius + dy:radius + dy + h, radius + dx:radius + dx + w]
    return out


def _connected(region: np.ndarray, start, goal) -> bool:
    """Whether ``goal`` is reachable from ``start`` through ``region`` (8-connectivity)."""
    if not region[start]:
        return False
    seen, todo = {tuple(start)}, [tuple(start)]
    while todo:
        y, x = todo.pop()
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                q = (y + dy, x + dx)
                if 0 <= q[0] < region.shape[0] and 0 <= q[1] < region.shape[1] and \
                        region[q] and q not in seen:
                    seen.add(q)
                    todo.append(q)
    return tuple(goal) in seen


def _check_rendering(made: gen.Rendering, p: gen.SnakesParams) -> None:
    """The markers end the intended contours, and a positive's markers are connected."""
    first, second = made.marker_contours
    assert made.label == int(first == second)
    assert made.markers == (made.origins[first], made.terminals[second])
    assert made.image.shape == (p.window_size,) * 2 and made.image.dtype == np.uint8
    assert made.image.min() == 0 and made.image.max() == 255  # min-max scaled
    gap = 2 * made.margin  # paddles are 2 * margin apart
    for k in (0, 1):  # each target contour is one dashed curve from its origin to its end
        drawn = _dilate(made.targets[k] > 0.1, gap)
        assert _connected(drawn, made.origins[k], made.terminals[k])
    for centre in made.markers:  # the markers are drawn, bright
        assert made.image[centre] >= 100
    on_image = _dilate(made.image > 25, gap)
    if made.label == 1:  # in the picture itself, the two markers are linked by the contour
        assert _connected(on_image, made.markers[0], made.markers[1])
    else:  # the end marker sits on the other contour, which does not start at marker 1
        assert made.targets[second][made.markers[1]] > 0.1
        assert made.origins[second] != made.markers[0]


def test_renderings_32_have_the_intended_structure():
    p = gen.lra_params(32)
    made = [gen.render_sample(gen.sample_rng(1, i), p) for i in range(24)]
    for sample in made:
        _check_rendering(sample, p)
        assert sample.distractors <= p.num_distractor_snakes
    labels = [m.label for m in made]
    assert 0 < sum(labels) < len(labels)


def test_rendering_128_has_the_intended_structure():
    p = dataclasses.replace(gen.lra_params(128), paddle_margin_list=(2,))  # the faster margin
    for i in range(2):
        _check_rendering(gen.render_sample(gen.sample_rng(3, i), p), p)


def test_lra_settings():
    p32, p128 = gen.lra_params(32), gen.lra_params(128)
    assert (p32.window_size, p32.paddle_length, p32.paddle_thickness, p32.marker_radius,
            p32.seed_distance, p32.continuity, p32.paddle_margin_list, p32.antialias_scale,
            p32.snake_contrast_list, p32.paddle_contrast_list) == (
        32, 2, 0.5, 1.5, 7, 1.0, (1,), 2, (2.0,), (0.75,))
    assert (p32.contour_length, p32.distractor_length, p32.num_distractor_snakes) == (14, 4, 5)
    assert (p128.window_size, p128.paddle_length, p128.paddle_thickness, p128.marker_radius,
            p128.seed_distance, p128.continuity, p128.paddle_margin_list,
            p128.snake_contrast_list) == (128, 5, 1.5, 3, 20, 1.8, (2, 3), (0.9,))
    assert (p128.distractor_length, p128.num_distractor_snakes) == (4, 8)
    assert gen.lra_params(32, 9).num_distractor_snakes == 6
    assert gen.lra_params(128, 6).num_distractor_snakes == 17
    assert [gen.level_dir(d) for d in (6, 9, 14)] == [
        "curv_baseline", "curv_contour_length_9", "curv_contour_length_14"]
    with pytest.raises(ValueError, match="difficulty"):
        gen.lra_params(32, 10)
    with pytest.raises(ValueError, match="32 or 128"):
        gen.lra_params(64)


def test_rendering_is_deterministic():
    p = gen.lra_params(32, 6)
    a, b = (gen.render_sample(gen.sample_rng(5, 2), p) for _ in range(2))
    assert np.array_equal(a.image, b.image) and a.label == b.label
    c = gen.render_sample(gen.sample_rng(5, 3), p)
    assert not np.array_equal(a.image, c.image)


# ---------------------------------------------------------------------------- layout

def test_official_layout(official):
    level = official / "curv_contour_length_14"
    assert sorted(p.name for p in (level / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy"]
    lines = (level / "metadata" / "2.npy").read_text().splitlines()
    assert len(lines) == 2
    fields = lines[1].split()
    assert fields[:3] == ["imgs/2", "sample_1.png", "1"] and fields[3] in ("0", "1")
    assert fields[4:] == ["1.0", "14", "4", "2", "0.5", "1", "1"]
    with PIL.open(level / "imgs" / "2" / "sample_1.png") as image:
        assert image.mode == "L" and image.size == (32, 32)


def test_workers_do_not_change_the_output(official, tmp_path):
    gen.write_pathfinder(tmp_path, resolution=32, n=N_IMAGES, seed=0, workers=2, batch_size=5)
    compare = filecmp.dircmp(official / "curv_contour_length_14",
                             tmp_path / "curv_contour_length_14")
    assert not compare.left_only and not compare.right_only
    for batch in ("0", "1", "2"):
        files = sorted(p.name for p in (tmp_path / "curv_contour_length_14/imgs" / batch).iterdir())
        same, different, errors = filecmp.cmpfiles(
            official / "curv_contour_length_14/imgs" / batch,
            tmp_path / "curv_contour_length_14/imgs" / batch, files, shallow=False)
        assert not different and not errors
    assert filecmp.cmp(official / "curv_contour_length_14/metadata/1.npy",
                       tmp_path / "curv_contour_length_14/metadata/1.npy", shallow=False)
    with pytest.raises(FileExistsError):
        gen.write_pathfinder(tmp_path, resolution=32, n=2, workers=1)


# ---------------------------------------------------------------------------- reader

def _load(root, split, **options):
    return wd.get("pathfinder32", split, root=root, **options)


def test_reader_splits_labels_and_items(official):
    level = official / "curv_contour_length_14"
    listed = dict(pf.read_metadata(level))
    splits = {s: _load(official, s) for s in ("train", "val", "test")}
    assert [len(splits[s]) for s in ("train", "val", "test")] == [10, 1, 1]
    paths = [p for s in splits.values() for p in s.paths]
    assert sorted(paths) == sorted(listed)  # disjoint and complete
    train = splits["train"]
    for i, path in enumerate(train.paths):
        item = train[i]
        assert item["label"] == listed[path]
        assert item["tokens"].shape == (1024,) and item["tokens"].dtype == torch.int64
        with PIL.open(path) as image:
            assert item["tokens"].tolist() == np.asarray(image).reshape(-1).tolist()
    assert train.info == wd.DatasetInfo(task="classification", vocab_size=256, num_classes=2,
                                        max_len=1024, pad_id=0)
    assert _load(official, "train").paths == train.paths  # the split is seeded
    assert _load(official, "train", split_seed=1).paths != train.paths


@pytest.mark.parametrize("layout", ["lra_release/pathfinder32", "pathfinder32"])
def test_release_layouts(official, tmp_path, layout):
    target = tmp_path / "data" / layout
    shutil.copytree(official, target)
    assert len(_load(tmp_path / "data", "train")) == 10


def test_broken_images_are_skipped_with_one_warning(copy):
    train = _load(copy, "train")
    victims = train.paths[:3]
    victims[0].write_bytes(b"")  # empty, as in LRA's release
    victims[1].write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    victims[2].unlink()
    with pytest.warns(UserWarning) as caught:
        damaged = _load(copy, "train")
    assert len(caught) == 1 and "skipped 3 of 10" in str(caught[0].message)
    assert len(damaged) == 7 and damaged.skipped == 3
    assert not set(victims) & set(damaged.paths)


def test_wrong_image_size_is_an_error(copy):
    path = _load(copy, "train").paths[0]
    PIL.fromarray(np.zeros((16, 16), np.uint8)).save(path)
    with pytest.raises(ValueError, match="16x16, expected 32x32") as info:
        _load(copy, "train")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("line, words", [
    ("imgs/0 sample_0.png 0", "at least 4"),
    ("imgs/0 sample_0.png 0 2 1.0", "must be 0 or 1"),
])
def test_bad_metadata_names_the_file_and_line(copy, line, words):
    path = copy / "curv_contour_length_14" / "metadata" / "1.npy"
    lines = path.read_text().splitlines()
    lines[2] = line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=words) as info:
        _load(copy, "val")
    assert f"{path}:3:" in str(info.value)


def test_binary_npy_metadata_is_read(copy):
    folder = copy / "curv_contour_length_14" / "metadata"
    before = pf.read_metadata(folder.parent)
    for path in folder.iterdir():  # as snakes2's np.save writes it
        rows = [line.split() for line in path.read_text().splitlines()]
        path.unlink()
        np.save(path, np.array(rows))
    assert pf.read_metadata(folder.parent) == before
    assert len(_load(copy, "train")) == 10


def test_missing_data_says_how_to_get_it(tmp_path):
    with pytest.raises(wd.DataMissingError) as info:
        wd.get("pathfinder128", "train", root=tmp_path)
    message = str(info.value)
    assert "lra_release.gz" in message and "weirdnet data build pathfinder128" in message
    assert str(tmp_path / "lra_release/pathfinder128/curv_contour_length_14") in message


def test_difficulty_6_reads_both_directory_names(official, tmp_path):
    for name in ("curv_baseline", "curv_contour_length_6"):
        shutil.copytree(official / "curv_contour_length_14", tmp_path / name / name)
        assert pf.find_level_dir(tmp_path / name, 32, 6) == tmp_path / name / name


def test_generated_cache(tmp_path):
    data = wd.get("pathfinder32", "val", n=10, seed=2, workers=1)
    assert len(data) == 1 and data.info.max_len == 1024
    (folder,) = (tmp_path / "cache" / "pathfinder32" / "generated").iterdir()
    assert folder.name.startswith("curv_contour_length_14-n10-seed2-")
    assert len(wd.get("pathfinder32", "train", n=10, seed=2, workers=1)) == 8


def test_pillow_missing_is_explained(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match="pip install pillow"):
        gen.require_pillow()


def _cli(*argv: str) -> int:
    return main(["data", *argv])


def test_cli_generate_and_show_montage(tmp_path, capsys):
    out = tmp_path / "pf"
    assert _cli("build", "pathfinder32", "--out", str(out), "--n", "6", "--workers", "1",
                "--batch-size", "4", "--difficulty", "9", "--no-progress") == 0
    assert sorted(p.name for p in (out / "curv_contour_length_9" / "imgs").iterdir()) == [
        "0", "1"]
    montage = tmp_path / "montage.png"
    assert _cli("show", "pathfinder32", "--root", str(out), "--difficulty", "9",
                "--out", str(montage)) == 0
    assert "5 pathfinder32 train images" in capsys.readouterr().out
    with PIL.open(montage) as image:  # 5 tiles of 128 px in 3 columns, 2 rows with labels
        assert image.mode == "RGB" and image.size == (3 * 132 + 4, 2 * 146 + 4)
    assert _cli("show", "pathfinder32", "--root", str(out)) == 2  # no --out
    assert _cli("show", "pathfinder32", "--root", str(tmp_path / "none"), "--out",
                str(montage)) == 2
    assert "lra_release.gz" in capsys.readouterr().err
