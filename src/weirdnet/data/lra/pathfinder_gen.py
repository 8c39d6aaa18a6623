"""Pathfinder images: a re-implementation of Linsley et al.'s ``snakes2`` generator.

Each image holds two *target* contours and several short *distractor* contours, all dashed
curves made of short straight "paddles", plus two round markers.  Label 1 (positive): the
markers sit at the two ends of the same target contour; label 0: at an end of each target
contour (the first contour's start, the other's end).  The task is to tell whether the
markers are connected.

The algorithm follows ``snakes2.py``/``snakes.py`` (github.com/drewlinsley/pathfinder) step
by step, with numpy and Pillow instead of scipy/OpenCV:

- a paddle of ``paddle_length`` px and ``paddle_thickness`` is drawn with Pillow at
  ``antialias_scale`` times the resolution, then Lanczos-resized (anti-aliasing); its
  *mask* is the paddle dilated by a disc of radius ``margin`` (also anti-aliased);
- a contour starts with a seed paddle at a free position (the free area is the mask dilated
  by the paddle's own shape); each next paddle's far end is drawn from the points at
  distance ``paddle_length + margin`` beyond the last pivot, weighted by
  ``cos(min(continuity * turn, pi/2))**2`` times how free the point is; a paddle whose
  mask overlaps the mask of the earlier paddles (sum >= 1.8) is redrawn (at most
  ``max_paddle_retrial + 1`` tries), and a contour that cannot grow is restarted;
- the two target contours start ``seed_distance`` px apart, at least ``2 * seed_distance``
  px from the border, and grow alternately; distractors have ``contour_length // 3``
  paddles and their own contrast;
- markers are discs of ``marker_radius`` (anti-aliased like the paddles); the image is the
  pixel-wise maximum of everything, min-max scaled to uint8 (as ``scipy.misc.imsave``).

:func:`lra_params` gives the settings the Long Range Arena used for Pathfinder-32 and
Pathfinder-128 (Path-X); images are deterministic in ``(seed, index)``.
"""

from __future__ import annotations

import functools
import math
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

__all__ = ["LEVELS", "Rendering", "SnakesParams", "default_workers", "level_dir", "lra_params",
           "metadata_line", "render_sample", "require_pillow", "sample_rng", "write_pathfinder"]

LEVELS = {6: "curv_baseline", 9: "curv_contour_length_9", 14: "curv_contour_length_14"}
"""Directory of each difficulty (contour length) in the official release."""


def level_dir(difficulty: int) -> str:
    """The official directory name of a difficulty: 6 -> ``curv_baseline``, 9, 14 -> ..."""
    if difficulty not in LEVELS:
        raise ValueError(f"difficulty must be one of {sorted(LEVELS)} (paddles per target "
                         f"contour), got {difficulty!r}")
    return LEVELS[difficulty]


def require_pillow():
    """The ``PIL`` package (Pillow), or ImportError saying how to install it."""
    try:
        import PIL.Image
        import PIL.ImageDraw  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("Pathfinder images need Pillow: pip install pillow "
                          "(or pip install 'weirdnet[data]')") from err
    return PIL


@dataclass(frozen=True)
class SnakesParams:
    """The ``snakes2`` arguments (names as in its ``Args``); sizes in pixels."""

    window_size: int
    padding: int
    antialias_scale: int
    seed_distance: int
    marker_radius: float
    contour_length: int
    distractor_length: int
    num_distractor_snakes: int
    snake_contrast_list: tuple[float, ...]
    paddle_contrast_list: tuple[float, ...]
    continuity: float
    paddle_length: int
    paddle_thickness: float
    paddle_margin_list: tuple[int, ...]
    max_paddle_retrial: int = 2
    max_distractor_contour_retrial: int = 4

    def __post_init__(self) -> None:
        scaled = self.paddle_thickness * self.antialias_scale
        if scaled != round(scaled):
            raise ValueError("paddle_thickness * antialias_scale must be a whole number "
                             f"(got {scaled}), as in snakes2")


def lra_params(resolution: int, difficulty: int = 14) -> SnakesParams:
    """The LRA settings (``lra_benchmarks/data/pathfinder.py``) for 32 or 128 pixels.

    difficulty: paddles per target contour, 6, 9 or 14 (LRA's tasks use 14); distractors
    have ``difficulty // 3`` paddles, and there are ``20 // that`` (32 px) or ``35 // that``
    (128 px) of them.  Other values are those of the ``snakes2_wrapper.py`` defaults.
    """
    level_dir(difficulty)
    dl = difficulty // 3
    if resolution == 32:
        return SnakesParams(
            window_size=32, padding=1, antialias_scale=2, seed_distance=7, marker_radius=1.5,
            contour_length=difficulty, distractor_length=dl, num_distractor_snakes=20 // dl,
            snake_contrast_list=(2.0,), paddle_contrast_list=(0.75,), continuity=1.0,
            paddle_length=2, paddle_thickness=0.5, paddle_margin_list=(1,))
    if resolution == 128:
        return SnakesParams(
            window_size=128, padding=1, antialias_scale=2, seed_distance=20, marker_radius=3,
            contour_length=difficulty, distractor_length=dl, num_distractor_snakes=35 // dl,
            snake_contrast_list=(0.9,), paddle_contrast_list=(1.0,), continuity=1.8,
            paddle_length=5, paddle_thickness=1.5, paddle_margin_list=(2, 3))
    raise ValueError(f"LRA Pathfinder resolution must be 32 or 128, got {resolution!r}")


def sample_rng(seed: int, index: int) -> np.random.Generator:
    """The random generator of image ``index`` (independent of batching and workers)."""
    return np.random.default_rng(np.random.SeedSequence([seed, index]))


# ---------------------------------------------------------------------------- geometry

def _frozen(array: np.ndarray) -> np.ndarray:
    """``array`` made read-only (it is cached and shared)."""
    array.setflags(write=False)
    return array


def _translate(coord, theta: float, dist: float) -> tuple[int, int]:
    """``coord`` moved by ``dist`` along ``theta`` (radians; y = sin, x = cos), ceil-rounded."""
    return (int(math.ceil(coord[0] + dist * math.sin(theta))),
            int(math.ceil(coord[1] + dist * math.cos(theta))))


def _flip(theta: float) -> float:
    """The opposite direction, kept in [-pi, pi]."""
    return theta + math.pi if theta < 0 else theta - math.pi


def _inside(coord, size: int) -> bool:
    return 0 <= coord[0] < size and 0 <= coord[1] < size


@functools.lru_cache(maxsize=64)
def _disc_offsets(radius: int) -> np.ndarray:
    """(k, 2) offsets of the disc ``y**2 + x**2 <= radius**2`` (snakes' dilation struct)."""
    yy, xx = np.mgrid[-radius:radius + 1, -radius:radius + 1]
    keep = yy ** 2 + xx ** 2 <= radius ** 2
    return _frozen(np.stack([yy[keep], xx[keep]], axis=1))


def _dilate(image: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Grey dilation as OpenCV's: ``out[p] = max(image[p + o] for o in offsets)``.

    Pixels outside the image count as 0 (all images here are >= 0).
    """
    r = int(np.abs(offsets).max()) if len(offsets) else 0
    h, w = image.shape
    padded = np.zeros((h + 2 * r, w + 2 * r), dtype=image.dtype)
    padded[r:r + h, r:r + w] = image
    out = np.zeros_like(image)
    for dy, dx in offsets:
        np.maximum(out, padded[r + dy:r + dy + h, r + dx:r + dx + w], out=out)
    return out


def _dilate_at(image: np.ndarray, points: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``_dilate(image, offsets)`` at the (k, 2) ``points`` only."""
    h, w = image.shape
    near = points[:, None, :] + offsets[None, :, :]
    ys, xs = near[..., 0], near[..., 1]
    valid = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
    values = image[np.minimum(np.maximum(ys, 0), h - 1), np.minimum(np.maximum(xs, 0), w - 1)]
    return np.where(valid, values, 0.0).max(axis=1)


def _bytescale(image: np.ndarray) -> np.ndarray:
    """Min-max scale to uint8 with rounding, as ``scipy.misc.bytescale`` (imsave/imresize)."""
    if image.dtype == np.uint8:
        return image
    low, high = float(image.min()), float(image.max())
    scale = 255.0 / ((high - low) or 1.0)
    return (np.clip((image - low) * scale, 0, 255) + 0.5).astype(np.uint8)


def _resize(image: np.ndarray, size: int) -> np.ndarray:
    """``scipy.misc.imresize(image, (size, size), interp='lanczos')`` as floats in [0, 1]."""
    pil = require_pillow()
    small = pil.Image.fromarray(_bytescale(image)).resize((size, size), pil.Image.LANCZOS)
    return np.asarray(small, dtype=np.float64) / 255.0


# ---------------------------------------------------------------------------- stamps

@dataclass(frozen=True)
class _Stamp:
    """A patch placed at ``(top, left)`` of an image, already clipped to the image."""

    top: int
    left: int
    values: np.ndarray

    def region(self, image: np.ndarray) -> np.ndarray:
        h, w = self.values.shape
        return image[self.top:self.top + h, self.left:self.left + w]

    def max_into(self, image: np.ndarray) -> None:
        """image = max(image, stamp), in place."""
        region = self.region(image)
        np.maximum(region, self.values, out=region)

    def peak_sum(self, image: np.ndarray) -> float:
        """max(image + stamp) over the stamp (elsewhere the stamp is 0)."""
        return float((self.region(image) + self.values).max()) if self.values.size else 0.0


def _stamp(patch: np.ndarray, center, shape: tuple[int, int]) -> _Stamp:
    """``patch`` (odd square) centred at ``center`` of an image of ``shape``, clipped."""
    r = patch.shape[0] // 2
    top, left = center[0] - r, center[1] - r
    y0, x0 = max(top, 0), max(left, 0)
    y1 = min(top + patch.shape[0], shape[0])
    x1 = min(left + patch.shape[1], shape[1])
    if y1 <= y0 or x1 <= x0:
        return _Stamp(0, 0, np.zeros((0, 0)))
    return _Stamp(y0, x0, patch[y0 - top:y1 - top, x0 - left:x1 - left])


# ---------------------------------------------------------------------------- paddles

@functools.lru_cache(maxsize=8192)
def _paddle(theta: float, length: int, thickness: float, margin: int, aa: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """``(line, mask)`` patches (2R+1 square, R = length + ceil(thickness) + margin) of a
    paddle from the centre along ``theta``: snakes' ``draw_line_n_mask`` before placement."""
    pil = require_pillow()
    radius = length + math.ceil(thickness) + margin
    blown_size, centre = radius * 2 * aa + 1, radius * aa
    head = _translate((centre, centre), theta, length * aa)
    blown = pil.Image.new("F", (blown_size, blown_size), 0.0)
    pil.ImageDraw.Draw(blown).line([(centre, centre), (head[1], head[0])], fill=255.0,
                                   width=int(round(thickness * aa)))
    blown = np.asarray(blown, dtype=np.float64)
    mask_blown = _dilate(blown, _disc_offsets(margin * aa)).astype(np.uint8)
    return _frozen(_resize(blown, 2 * radius + 1)), _frozen(_resize(mask_blown, 2 * radius + 1))


@functools.lru_cache(maxsize=8192)
def _seed_offsets(theta: float, length: int, thickness: float, margin: int, aa: int
                  ) -> np.ndarray:
    """Dilation offsets that keep a seed paddle along ``theta`` off occupied pixels.

    snakes draws the paddle mask from ``(L+m+1, L+m+1)`` in a ``2(L+m)+1`` square and keeps
    its fully-on pixels (astype uint8) as an OpenCV kernel anchored at the centre.
    """
    _, mask = _paddle(theta, length, thickness, margin, aa)
    size = 2 * (length + margin) + 1
    head = (length + margin + 1, length + margin + 1)
    struct = np.zeros((size, size))
    _stamp(mask, head, struct.shape).max_into(struct)
    ys, xs = np.nonzero(struct.astype(np.uint8))
    return _frozen(np.stack([ys, xs], axis=1) - (length + margin))


def _draw(coord, theta: float, p: SnakesParams, margin: int, contrast: float, shape
          ) -> tuple[_Stamp, _Stamp]:
    """The line (times ``contrast``) and mask stamps of a paddle from ``coord``."""
    line, mask = _paddle(theta, p.paddle_length, p.paddle_thickness, margin, p.antialias_scale)
    return _stamp(line * contrast, coord, shape), _stamp(mask, coord, shape)


def _choice(rng: np.random.Generator, values):
    """A uniformly drawn element (snakes: ``list[np.random.randint(0, len)]``)."""
    return values[int(rng.integers(len(values)))]


def _random_degree(rng: np.random.Generator) -> float:
    """snakes' seed orientation: a whole degree in [-180, 180), in radians."""
    return int(rng.integers(-180, 180)) * math.pi / 180


# ---------------------------------------------------------------------------- contours

@dataclass
class _Contour:
    """A growing contour: its drawing layer, last pivot and direction, and its ends.

    ``segment`` is the mask of the newest paddle; it joins the shared mask one step later,
    so that a paddle is only tested against paddles that are not its direct neighbour.
    """

    layer: np.ndarray
    pivot: tuple[int, int]
    theta: float
    segment: _Stamp
    origin: tuple[int, int]
    terminal: tuple[int, int] | None = None


@functools.lru_cache(maxsize=64)
def _ring(step: float) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (y, x) of points one pixel of arc apart on a circle of radius ``step``."""
    angles = np.arange(0, 360, 360.0 / (2 * step * math.pi)) * math.pi / 180
    return _frozen(step * np.sin(angles)), _frozen(step * np.cos(angles))


def _candidates(pivot, theta: float, step: float, mask: np.ndarray, margin: int,
                continuity: float):
    """``(coords (k, 2), directions (k,), cmf (k,))`` of the next paddle's far end, or None.

    snakes' ``get_coords_cmf``: the pixels on a circle of radius ``step`` around ``pivot``,
    weighted by ``cos(min(continuity * |turn|, pi/2))**2 * (1 - occupied)``, where
    ``occupied`` is the mask dilated by a disc of radius ``margin``.
    """
    h, w = mask.shape
    ring_y, ring_x = _ring(step)
    ys, xs = pivot[0] + ring_y, pivot[1] + ring_x
    inside = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
    if not inside.any():
        return None
    keys = np.unique(ys[inside].astype(int) * w + xs[inside].astype(int))  # row-major order
    coords = np.stack([keys // w, keys % w], axis=1)
    directions = np.arctan2(coords[:, 0] - pivot[0], coords[:, 1] - pivot[1])
    turn = np.abs(directions - theta)
    turn = np.minimum(np.minimum(turn, 2 * np.pi - turn) * continuity, 0.5 * np.pi)
    occupied = _dilate_at(mask, coords, _disc_offsets(margin))
    pmf = (1 - occupied) * np.maximum(np.cos(turn), 0) ** 2
    total = pmf.sum()
    if total < 1e-4:
        return None
    return coords, directions, np.cumsum(pmf / total)


def _extend(rng, contour: _Contour, mask: np.ndarray, p: SnakesParams, margin: int,
            contrast: float) -> bool:
    """Add one paddle to ``contour`` (snakes' ``extend_snake``); False if it cannot grow.

    On success the paddle is drawn into ``contour.layer`` and the previous paddle's mask
    into ``mask``; on failure nothing changes.
    """
    length = p.paddle_length
    pivot = _translate(contour.pivot, contour.theta, length + 2 * margin)
    found = _candidates(pivot, contour.theta, length + margin, mask, margin, p.continuity)
    if found is None:
        return False
    coords, directions, cmf = found
    for _ in range(p.max_paddle_retrial + 1):
        pick = int(np.argmax(cmf - rng.random() > 0))
        head, theta = (int(coords[pick, 0]), int(coords[pick, 1])), float(directions[pick])
        line, segment = _draw(head, _flip(theta), p, margin, contrast, mask.shape)
        if segment.peak_sum(mask) < 1.8:
            line.max_into(contour.layer)
            contour.segment.max_into(mask)
            contour.pivot, contour.theta, contour.segment = pivot, theta, segment
            contour.terminal = head
            return True
    return False


def _initial_mask(p: SnakesParams) -> np.ndarray:
    """The mask before any contour: 1 on the ``padding`` border, 0 elsewhere."""
    mask = np.zeros((p.window_size, p.window_size))
    if p.padding > 0:
        pad = p.padding
        mask[:pad], mask[-pad:], mask[:, :pad], mask[:, -pad:] = 1, 1, 1, 1
    return mask


@functools.lru_cache(maxsize=1024)
def _first_tails(theta: float, p: SnakesParams, margin: int) -> np.ndarray:
    """:func:`_free_tails` of the first target seed (its mask is always the initial one)."""
    return _frozen(_free_tails(_initial_mask(p), theta, p, margin, border=2 * p.seed_distance))


def _free_tails(mask: np.ndarray, theta: float, p: SnakesParams, margin: int, border: int
                ) -> np.ndarray:
    """(k, 2) pixels where a seed paddle along ``theta`` keeps off the mask and the border."""
    lined = mask.copy()
    lined[:border], lined[-border:], lined[:, :border], lined[:, -border:] = 1, 1, 1, 1
    offsets = _seed_offsets(theta, p.paddle_length, p.paddle_thickness, margin,
                            p.antialias_scale)
    return np.argwhere(np.ceil(_dilate(lined, offsets) - 0.3) == 0)


def _seed(rng, layer: np.ndarray, mask: np.ndarray, p: SnakesParams, margin: int,
          contrast: float, border: int | None, stop_with_availability: float | None = None
          ) -> _Contour | None:
    """A contour's first paddle (snakes' ``seed_snake``) drawn into ``layer``, or None.

    The tail is drawn among free pixels at least ``border`` px from the edge; None when no
    pixel is free, when less than ``stop_with_availability`` of the mask is free, or after
    ``max_paddle_retrial + 1`` paddles that would leave the image.  ``border=None``: the
    first target's seed (mask untouched, border ``2 * seed_distance``; cached per angle).
    """
    size = mask.shape[0]
    if stop_with_availability is not None and \
            np.count_nonzero(np.ceil(mask - 0.3) == 0) / mask.size < stop_with_availability:
        return None
    for _ in range(p.max_paddle_retrial + 1):
        theta = _random_degree(rng)
        if border is None:
            free = _first_tails(theta, p, margin)
        else:
            free = _free_tails(mask, theta, p, margin, border)
        if len(free) == 0:
            return None
        tail = tuple(int(v) for v in free[rng.integers(len(free))])
        head = _translate(tail, theta, p.paddle_length)
        pivot = _translate(head, _flip(theta), p.paddle_length + margin)
        if _inside(head, size) and _inside(pivot, size):
            line, segment = _draw(tail, theta, p, margin, contrast, mask.shape)
            line.max_into(layer)
            return _Contour(layer, pivot, theta, segment, origin=tail)
    return None


def _seed_near(rng, origin, mask: np.ndarray, p: SnakesParams, margin: int, contrast: float
               ) -> _Contour | None:
    """The second target's first paddle, its tail ``seed_distance`` px from ``origin``."""
    size = mask.shape[0]
    for _ in range(p.max_paddle_retrial + 1):
        theta = _random_degree(rng)
        angle = int(rng.integers(0, 360)) * math.pi / 180
        tail = (int(round(origin[0] + p.seed_distance * math.sin(angle))),
                int(round(origin[1] + p.seed_distance * math.cos(angle))))
        head = _translate(tail, theta, p.paddle_length)
        pivot = _translate(head, _flip(theta), p.paddle_length + margin)
        if _inside(head, size) and _inside(pivot, size):
            layer = np.zeros(mask.shape)
            line, segment = _draw(tail, theta, p, margin, contrast, mask.shape)
            line.max_into(layer)
            return _Contour(layer, pivot, theta, segment, origin=tail)
    return None


def _target_pair(rng, p: SnakesParams, margin: int
                 ) -> tuple[list[_Contour], np.ndarray] | None:
    """Both target contours, grown alternately (snakes2's ``two_snakes``), and the mask."""
    mu = rng.permutation(np.array(p.snake_contrast_list * 2))[:2]
    mask = _initial_mask(p)
    first = _seed(rng, np.zeros(mask.shape), mask, p, margin,
                  _choice(rng, p.paddle_contrast_list) * mu[0], border=None)
    if first is None:
        return None
    second = _seed_near(rng, first.origin, mask, p, margin,
                        _choice(rng, p.paddle_contrast_list) * mu[1])
    if second is None:
        return None
    contours = [first, second]
    for _ in range(p.contour_length - 1):
        contrast = _choice(rng, p.paddle_contrast_list)
        for contour, scale in zip(contours, mu):
            if not _extend(rng, contour, mask, p, margin, contrast * scale):
                return None
    contours[-1].segment.max_into(mask)  # as snakes2: only the second contour's last paddle
    return contours, mask


def _distractor(rng, image: np.ndarray, mask: np.ndarray, p: SnakesParams, margin: int
                ) -> bool:
    """Draw one distractor contour into ``image`` and ``mask`` (snakes' ``make_snake``)."""
    layer, trial_mask = image.copy(), mask.copy()
    contour = _seed(rng, layer, trial_mask, p, margin, _choice(rng, p.snake_contrast_list),
                    border=1, stop_with_availability=0.01)
    if contour is None:
        return False
    for _ in range(p.distractor_length - 1):
        if not _extend(rng, contour, trial_mask, p, margin,
                       _choice(rng, p.snake_contrast_list)):
            return False
    contour.segment.max_into(trial_mask)
    image[...], mask[...] = layer, trial_mask
    return True


def _distractors(rng, image: np.ndarray, mask: np.ndarray, p: SnakesParams, margin: int
                 ) -> int:
    """Up to ``num_distractor_snakes`` distractors, each tried up to
    ``max_distractor_contour_retrial + 1`` times; returns how many were drawn."""
    drawn = 0
    for _ in range(p.num_distractor_snakes):
        for _ in range(p.max_distractor_contour_retrial + 1):
            if _distractor(rng, image, mask, p, margin):
                drawn += 1
                break
    return drawn


def _marker(size: int, centre: tuple[int, int], radius: float, aa: int) -> np.ndarray:
    """An anti-aliased disc at ``centre`` in [0, 1] (snakes2's ``draw_circle``)."""
    ys = np.arange(size * aa)[:, None] - centre[0] * aa
    xs = np.arange(size * aa)[None, :] - centre[1] * aa
    return _resize((xs ** 2 + ys ** 2 <= (radius * aa) ** 2).astype(np.float64), size)


# ---------------------------------------------------------------------------- samples

@dataclass(frozen=True)
class Rendering:
    """One generated image and how it was made.

    image: uint8 (W, W), min-max scaled; label: 1 if both markers end the same contour.
    targets: the two target contours' own layers (float (W, W), before scaling);
    origins/terminals: each target's first and last paddle ends (row, col);
    markers: the two marker centres; marker_contours: the target each marker belongs to;
    margin: the paddle margin drawn for this image; distractors: how many were drawn.
    """

    image: np.ndarray
    label: int
    targets: tuple[np.ndarray, np.ndarray]
    origins: tuple[tuple[int, int], tuple[int, int]]
    terminals: tuple[tuple[int, int], tuple[int, int]]
    markers: tuple[tuple[int, int], tuple[int, int]]
    marker_contours: tuple[int, int]
    margin: int
    distractors: int


def render_sample(rng: np.random.Generator, p: SnakesParams, max_attempts: int = 200_000
                  ) -> Rendering:
    """One Pathfinder image as snakes2's ``from_wrapper`` loop body makes it.

    The target pair is redrawn until both contours reach ``contour_length`` paddles
    (RuntimeError after ``max_attempts``, which the LRA settings never come near).
    """
    label = int(rng.integers(2))
    margin = int(_choice(rng, p.paddle_margin_list))
    for _ in range(max_attempts):
        pair = _target_pair(rng, p, margin)
        if pair is not None:
            break
    else:
        raise RuntimeError(f"could not place two target contours in {max_attempts} attempts "
                           f"with {p}")
    contours, mask = pair
    image = np.maximum(contours[0].layer, contours[1].layer)
    drawn = _distractors(rng, image, mask, p, margin) if p.num_distractor_snakes > 0 else 0
    first = int(rng.integers(2))
    second = first if label == 1 else 1 - first
    ends = (contours[first].origin, contours[second].terminal)
    markers = [_marker(p.window_size, end, p.marker_radius, p.antialias_scale) for end in ends]
    final = _bytescale(np.maximum(image, np.maximum(*markers)))
    return Rendering(final, label, (contours[0].layer, contours[1].layer),
                     (contours[0].origin, contours[1].origin),
                     (contours[0].terminal, contours[1].terminal), ends, (first, second),
                     margin, drawn)


def metadata_line(batch: int, index: int, label: int, p: SnakesParams, margin: int) -> str:
    """One metadata line as snakes2 writes it (the label is field 3)::

        imgs/<batch> sample_<index>.png <index> <label> <continuity> <contour_length>
        <distractor_length> <paddle_length> <paddle_thickness> <margin> <#paddle contrasts>
    """
    fields = (f"imgs/{batch}", f"sample_{index}.png", index, label, p.continuity,
              p.contour_length, p.distractor_length, p.paddle_length, p.paddle_thickness,
              margin, len(p.paddle_contrast_list))
    return " ".join(map(str, fields))


# ---------------------------------------------------------------------------- writing

@dataclass(frozen=True)
class _Chunk:
    """Images ``first .. first + count - 1`` of batch ``batch`` (one worker task)."""

    level: str
    params: SnakesParams
    seed: int
    batch: int
    first: int
    count: int
    batch_size: int


def _render_chunk(chunk: _Chunk) -> tuple[int, int, list[str]]:
    """Render and save a chunk's PNGs; return ``(batch, first, metadata lines)``."""
    pil = require_pillow()
    folder = Path(chunk.level) / "imgs" / str(chunk.batch)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(chunk.first, chunk.first + chunk.count):
        rng = sample_rng(chunk.seed, chunk.batch * chunk.batch_size + i)
        made = render_sample(rng, chunk.params)
        pil.Image.fromarray(made.image).save(folder / f"sample_{i}.png")
        lines.append(metadata_line(chunk.batch, i, made.label, chunk.params, made.margin))
    return chunk.batch, chunk.first, lines


def _plan(level: Path, p: SnakesParams, n: int, seed: int, batch_size: int, chunk_size: int
          ) -> list[_Chunk]:
    """Cut ``n`` images into batches of ``batch_size`` and those into worker chunks."""
    chunks = []
    for start in range(0, n, batch_size):
        batch, count = start // batch_size, min(batch_size, n - start)
        for first in range(0, count, chunk_size):
            chunks.append(_Chunk(str(level), p, seed, batch, first,
                                 min(chunk_size, count - first), batch_size))
    return chunks


def default_workers() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def write_pathfinder(out_dir: str | Path, *, resolution: int = 32, difficulty: int = 14,
                     n: int = 1000, seed: int = 0, workers: int | None = None,
                     batch_size: int = 1000, params: SnakesParams | None = None,
                     progress: bool = False) -> Path:
    """Generate ``n`` images in the official layout; return the level directory.

    Layout (as the LRA release)::

        out_dir/<level>/imgs/<batch>/sample_<i>.png     8-bit grayscale, W x W
        out_dir/<level>/metadata/<batch>.npy            text, one line per image

    ``<level>`` is :func:`level_dir` (``curv_contour_length_14`` for difficulty 14); image
    ``i`` of batch ``b`` is drawn with :func:`sample_rng` ``(seed, b * batch_size + i)``,
    so the output does not depend on ``workers`` (processes; default: all usable CPUs).
    params: override :func:`lra_params` ``(resolution, difficulty)``.  Progress: a tqdm bar
    on stderr when ``progress``.
    """
    if n < 1 or batch_size < 1:
        raise ValueError(f"n and batch_size must be >= 1, got n={n}, batch_size={batch_size}")
    p = params or lra_params(resolution, difficulty)
    level = Path(out_dir) / level_dir(p.contour_length)
    if (level / "metadata").is_dir() and any((level / "metadata").iterdir()):
        raise FileExistsError(f"{level} already holds a Pathfinder set; choose another --out")
    workers = max(1, workers or default_workers())
    chunk_size = max(1, min(batch_size, 50, n // (4 * workers)))
    chunks = _plan(level, p, n, seed, batch_size, chunk_size)
    found: dict[int, list[tuple[int, list[str]]]] = {}
    with tqdm(total=n, desc=f"generating Pathfinder-{p.window_size}", unit="img",
              disable=not progress) as bar:
        for batch, first, lines in _run(chunks, workers):
            found.setdefault(batch, []).append((first, lines))
            bar.update(len(lines))
    (level / "metadata").mkdir(parents=True, exist_ok=True)
    for batch, parts in found.items():
        text = "".join(line + "\n" for _, lines in sorted(parts) for line in lines)
        (level / "metadata" / f"{batch}.npy").write_text(text)
    return level


def _run(chunks: list[_Chunk], workers: int):
    """Results of :func:`_render_chunk` for every chunk, in completion order."""
    if workers == 1 or len(chunks) == 1:
        yield from map(_render_chunk, chunks)
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(chunks))) as pool:
        for future in as_completed([pool.submit(_render_chunk, c) for c in chunks]):
            yield future.result()
