"""A labelled montage of images (Pathfinder / Path-X samples), as one PIL image."""

from __future__ import annotations

import math

from weirdnet.data.lra.pathfinder_gen import require_pillow


def montage(images, labels: list[int], *, scale: int = 4, columns: int | None = None):
    """A PIL RGB image: ``images`` (k, H, W) uint8 in a grid, each scaled ``scale`` times
    (nearest) with "#<i> label <y>" underneath (green for 1, red for 0)."""
    pil = require_pillow()
    count = len(images)
    columns = columns or math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    tile_h, tile_w = images.shape[1] * scale, images.shape[2] * scale
    band, gap = 14, 4
    sheet = pil.Image.new("RGB", (columns * (tile_w + gap) + gap,
                                  rows * (tile_h + band + gap) + gap), (40, 40, 40))
    draw = pil.ImageDraw.Draw(sheet)
    for i, (pixels, label) in enumerate(zip(images, labels)):
        x = gap + (i % columns) * (tile_w + gap)
        y = gap + (i // columns) * (tile_h + band + gap)
        tile = pil.Image.fromarray(pixels).resize((tile_w, tile_h), pil.Image.NEAREST)
        sheet.paste(tile.convert("RGB"), (x, y))
        colour = (90, 220, 90) if label == 1 else (240, 90, 90)
        draw.text((x + 2, y + tile_h + 1), f"#{i} label {label}", fill=colour)
    return sheet
