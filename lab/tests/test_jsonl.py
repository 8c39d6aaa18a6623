"""The JSON Lines reader that the lab's log readers share."""

from __future__ import annotations

from weirdnet_lab.harness.jsonl import json_objects


def test_json_objects_skips_blank_cut_and_non_object_lines(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"event": "start", "step": 0}\n\n[1, 2]\n"text"\n'
                   '{"event": "train", "step": 5}\n{"event": "tra', encoding="utf-8")
    assert list(json_objects(log)) == [{"event": "start", "step": 0},
                                       {"event": "train", "step": 5}]


def test_json_objects_of_an_empty_file(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("", encoding="utf-8")
    assert list(json_objects(log)) == []
