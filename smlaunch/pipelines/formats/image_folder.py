"""Image folders: torchvision's ImageFolder layout, `<class>/<...>/<image>`, one file per sample.

The rules are torchvision's (`torchvision.datasets.folder`), so a model trained here and one
trained with `ImageFolder` agree on what label 3 means: the classes are the channel's top-level
folders, sorted by name; a class's images are every file under its folder (at any depth) whose
extension is an image extension, case-insensitively; other files, and files at the top level,
are ignored; a class folder without an image is an error, as torchvision's `allow_empty=False`.
Hidden files and folders are skipped, as every channel listing does.
"""

from __future__ import annotations

from smlaunch.config.formats import IMAGE_EXTENSIONS

IMAGE_SIGNATURES = [
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"BM", "a BMP image"),
    (b"RIFF", "a WebP image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
]
"""The first bytes of the image files a channel holds (`sniff`)."""


def matches(head: bytes) -> bool:
    return any(head.startswith(signature) for signature, _ in IMAGE_SIGNATURES) or head[8:12] == b"WEBP"


def image_class(rel: str) -> str | None:
    """The class of a channel file at `rel` (relative path), or None when it is not a class image."""
    parts = rel.split("/")
    if len(parts) < 2 or not rel.lower().endswith(IMAGE_EXTENSIONS):
        return None
    return parts[0]


def classes_of(paths, folders=()) -> list[str]:
    """Sorted class names of a listing (`folders`: top-level folders seen, images or not)."""
    return sorted({c for c in map(image_class, paths) if c is not None} | set(folders))


def empty_classes(paths, folders) -> list[str]:
    """Top-level folders holding no image (torchvision refuses them: they shift every label after)."""
    found = {c for c in map(image_class, paths) if c is not None}
    return sorted(set(folders) - found)
