"""What a File, FastFile or file-system channel holds, listed on the hosts that receive it.

Listing happens once per run, before the datasets are built, on the receiving hosts themselves
(on SageMaker a GPU head may not receive a channel at all). Besides the files it gathers what the
trainer needs before the first step and a read task cannot know alone:

* image folders: the class names, from every host's listing (under ShardedByS3Key a host may
  hold no image of some class, and labels must mean the same on every host);
* Parquet: each file's row groups (the unit of parallel reading) and the largest label in the
  column statistics, so `model.num_classes` can come from the data without a pass over it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smlaunch.cluster.plan import host_selector
from smlaunch.errors import DataError
from smlaunch.pipelines.sources.channels import channel_dir, list_host_channel

LIST_TIMEOUT_S = 60
Files = list[tuple[str, int]]


@dataclass
class ChannelListing:
    files: dict[str, Files]
    """Receiving host -> (relative path, size) of what it holds (one host stands for all when every
    host holds everything)."""
    row_groups: dict[str, int] = field(default_factory=dict)
    """Parquet: relative path -> row groups."""
    classes: list[str] | None = None
    """Image folders: the sorted class names."""
    max_label: int | None = None
    """Parquet: the largest label in the statistics (None when a file has none)."""

    @property
    def num_classes(self) -> int | None:
        if self.classes is not None:
            return len(self.classes)
        return None if self.max_label is None else self.max_label + 1


def list_channel(channel, roots: dict[str, str | None]) -> ChannelListing:
    """List `channel` on its hosts (under ShardedByS3Key each; else the first stands for all)."""
    import ray

    sharded = channel.distribution == "ShardedByS3Key" and channel.file_system is None
    hosts = list(channel.hosts) if sharded else [channel.hosts[0]]
    lister = ray.remote(_list_or_empty)
    refs = {h: lister.options(num_cpus=0, max_retries=0, label_selector=host_selector(h)).remote(
        roots[h], channel.name, channel.record_format, channel.fields[1]) for h in hosts}
    answers = dict(zip(refs, ray.get(list(refs.values()), timeout=LIST_TIMEOUT_S)))
    files = {h: a["files"] for h, a in answers.items() if a["files"]}
    if not files:
        raise DataError(f"channel '{channel.name}': no {_what(channel.record_format)} on {', '.join(hosts)}")
    listing = ChannelListing(files)
    if channel.record_format == "image_folder":
        listing.classes = _classes(channel.name, answers)
    if channel.record_format == "parquet":
        for answer in answers.values():
            listing.row_groups.update(answer["row_groups"])
        labels = [a["max_label"] for a in answers.values() if a["files"]]
        listing.max_label = None if None in labels else int(max(labels))
    return listing


def _what(record_format: str) -> str:
    return {"image_folder": "images in class folders", "parquet": "Parquet files",
            "webdataset": "tar shards"}.get(record_format, "files")


def _classes(channel: str, answers: dict) -> list[str]:
    from smlaunch.pipelines.formats.image_folder import classes_of, empty_classes

    images = [rel for answer in answers.values() for rel, _ in answer["files"]]
    folders = {folder for answer in answers.values() for folder in answer["folders"]}
    empty = empty_classes(images, folders)
    if empty:
        raise DataError(f"channel '{channel}': class folder {', '.join(empty)} holds no image (extensions: jpg, "
                        "jpeg, png, ppm, bmp, pgm, tif, tiff, webp); torchvision's ImageFolder refuses it too, as it "
                        "would shift every label after it")
    return classes_of(images)


def _list_or_empty(opt_ml, channel: str, record_format: str, label: str | None) -> dict:
    """This host's files of the channel's format (and, for Parquet, their row groups and labels)."""
    try:
        listed = list_host_channel(opt_ml, channel)
    except DataError as exc:
        if "no files in" in str(exc):
            return {"files": [], "folders": [], "row_groups": {}, "max_label": None}
        raise
    answer = {"files": listed, "folders": [], "row_groups": {}, "max_label": None}
    if record_format == "image_folder":
        from smlaunch.pipelines.formats.image_folder import image_class

        answer["files"] = [(rel, size) for rel, size in listed if image_class(rel) is not None]
        answer["folders"] = sorted({rel.split("/")[0] for rel, _ in listed if "/" in rel})
    elif record_format == "parquet":
        answer["files"] = [(rel, size) for rel, size in listed if not rel.rpartition("/")[2].startswith("_")]
        answer["row_groups"], answer["max_label"] = _parquet_groups(opt_ml, channel, answer["files"], label)
    return answer


def _parquet_groups(opt_ml, channel: str, files: Files, label: str | None) -> tuple[dict[str, int], int | None]:
    """Row groups per file (from the footers: a ranged read each on FastFile) and the largest label."""
    from smlaunch.pipelines.formats.parquet import describe
    from smlaunch.pipelines.sources.fastfile import open_channel_file

    directory = channel_dir(opt_ml, channel)
    groups, largest = {}, []
    for rel, _ in files:
        with open_channel_file(directory, rel) as stream:
            try:
                groups[rel], top = describe(stream, f"{directory}/{rel}", label)
            except DataError as exc:
                raise DataError(f"channel '{channel}': {exc}") from None
        largest.append(top)
    return groups, (None if None in largest or not largest else max(largest))
