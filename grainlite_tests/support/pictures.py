"""Reading the PNGs that show_batch and the examples draw, to check what they show."""

from __future__ import annotations

from pathlib import Path

import numpy as np

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(path: Path) -> np.ndarray:
    """The picture as ``uint8`` RGB pixels of shape (height, width, 3); fails if not a PNG."""
    import matplotlib.image

    assert Path(path).read_bytes()[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    picture = matplotlib.image.imread(path)
    return np.round(picture[..., :3] * 255).astype(np.uint8)


def colour_area(picture: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 2) -> int:
    """How many pixels show the colour ``rgb`` (each channel within ``tolerance``)."""
    difference = np.abs(picture.astype(np.int16) - np.array(rgb, np.int16))
    return int(np.all(difference <= tolerance, axis=-1).sum())


def drawn_share(picture: np.ndarray) -> float:
    """The share of pixels that are not the white background."""
    return float(np.any(picture < 250, axis=-1).mean())


def dark_pixels(picture: np.ndarray) -> int:
    """Pixels dark in every channel: mostly the text of titles."""
    return int(np.all(picture < 80, axis=-1).sum())


def cell_centres(picture: np.ndarray, rows: int, columns: int, half: int = 5) -> list[bytes]:
    """The pixels around the centre of each cell of a ``rows`` x ``columns`` grid, as bytes."""
    height, width = picture.shape[:2]
    centres = []
    for r in range(rows):
        for c in range(columns):
            y, x = int((r + 0.5) * height / rows), int((c + 0.5) * width / columns)
            centres.append(picture[y - half : y + half, x - half : x + half].tobytes())
    return centres
