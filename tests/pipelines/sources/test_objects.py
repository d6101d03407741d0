"""Object sources: an S3 prefix longer than one page of ListObjectsV2 (1,000 keys) is listed whole,
on the local S3 server, and an object's size is one request."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from smlaunch.pipelines.sources.objects import ObjectSource


def test_an_s3_prefix_of_more_than_one_page_is_listed_whole_and_sorted(s3):
    s3.create_bucket(Bucket="many")
    keys = [f"train/c{i % 7}/{i:05d}.bin" for i in range(1234)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket="many", Key=key, Body=b"x" * (len(key) % 5)), keys))
    s3.put_object(Bucket="many", Key="train-other/x.bin", Body=b"not mine")
    assert s3.list_objects_v2(Bucket="many", Prefix="train/")["IsTruncated"]  # more than one page
    source = ObjectSource("s3://many/train/", s3.meta.endpoint_url)
    assert source.list() == sorted((key.removeprefix("train/"), len(key) % 5) for key in keys)
    assert source.size("c3/00003.bin") == len(keys[3]) % 5
    with pytest.raises(FileNotFoundError, match="s3://many/train/nope.bin"):
        source.size("nope.bin")
