"""The run's cache choice where the data hosts may go to none (issue 80): `autoscale.min_data_hosts: 0`
acts only on a running cluster's elastic group, and there needs the cache on."""

from types import SimpleNamespace

import pytest

from smlaunch.config import load_config
from smlaunch.errors import ConfigError
from smlaunch.launcher.job.cache_setup import choice, without_data_hosts


def _plan(min_hosts: int | None, mode: str = "attached"):
    elastic = None if min_hosts is None else SimpleNamespace(min_hosts=min_hosts)
    hosts = (SimpleNamespace(subcluster="train", num_cpus=8), SimpleNamespace(subcluster="data", num_cpus=4))
    return SimpleNamespace(elastic=elastic, mode=mode, hosts=hosts, train_workers=2, train_spare_cpus=6)


def test_min_data_hosts_0_needs_the_cache_where_it_acts_and_the_train_hosts_spare_cpus_stand_in(configs, tmp_path):
    zero = "autoscale={min_data_hosts: 0, max_data_hosts: 4}"
    off = load_config(configs / "hetero.yaml", [zero, "pipeline.cache=false"])
    with pytest.raises(
        ConfigError,
        match=r"^autoscale.min_data_hosts: 0 needs the chain's prefix cached, and the cache is off "
        r"\(pipeline.cache: false\)",
    ):
        choice(off, _plan(0))
    assert not choice(off, _plan(None, mode="local")).on  # fixed groups: the section does nothing, nothing refused
    assert not choice(off, _plan(1)).on
    cached = load_config(configs / "hetero.yaml", [zero, "pipeline.cache=true", f"pipeline.cache_dir={tmp_path}"])
    assert choice(cached, _plan(0)).on

    from smlaunch.pipelines.cache.store import CacheSpec, CacheStore

    spec = CacheSpec(str(tmp_path / "key"), 2, "key")
    spare = without_data_hosts(_plan(0), spec)
    assert spare() is None  # not sealed: the hosts the channels are read on stay
    CacheStore(spec.root).seal({"rows": 1, "units": 0, "shards": []})
    assert spare() == 6  # the train hosts' spare CPUs (`LaunchPlan.train_spare_cpus`)
    assert without_data_hosts(_plan(1), spec)() is None and without_data_hosts(_plan(0), None)() is None


class OneRank:
    """`trainers.control.Control` for one rank: a broadcast is the value itself."""

    def broadcast(self, value, src: int = 0):
        return value


def test_with_two_datasets_the_ranks_read_the_cached_one_once_sealed_and_a_cache_lost_mid_run_reads_the_files(tmp_path):
    """`autoscale.min_data_hosts: 0` (issue 80): the loop switches to the cached epochs' dataset once
    rank 0 finds the cache sealed; a cache gone after that is read from the files again where the train
    hosts can read them, and stops the run in one line where they cannot (a `ShardedByS3Key` channel)."""
    from smlaunch.errors import DataError
    from smlaunch.pipelines.cache.store import CacheSpec, CacheStore
    from smlaunch.pipelines.dataset import CACHED_TRAIN
    from smlaunch.trainers.cache_epochs import CacheEpochs

    spec = CacheSpec(str(tmp_path / "key"), 2, "key")
    epochs = CacheEpochs(spec, 0, two_datasets=True)
    epochs.agree(OneRank())
    assert epochs.dataset() == "train"  # epoch 1 writes it
    CacheStore(spec.root).seal({"rows": 3, "units": 1, "shards": [["a", 3, [], [[0, 9, 3]]]]})
    epochs.agree(OneRank())
    assert epochs.dataset() == CACHED_TRAIN and epochs.units(99, "key") == 1
    # an epoch whose positions count in the files (resumed from a checkpoint taken before the seal)
    # counts its units in the files, though the cache is sealed now
    assert epochs.units(99, None) == 99 and epochs.units(99, "another") is None
    assert CacheEpochs(spec, 0).dataset() == "train"  # one dataset: the train channel's reads the cache itself
    anywhere = CacheEpochs(spec, 0, two_datasets=True, files_anywhere=True)
    anywhere.agree(OneRank())
    (tmp_path / "key" / "FINAL").unlink()
    with pytest.raises(DataError, match=r"^pipeline.cache: the sealed cache at .* is gone \(its FINAL marker\)"):
        epochs.agree(OneRank())
    notes = []
    anywhere.agree(OneRank(), SimpleNamespace(put=lambda kind, text: notes.append(text)))
    assert anywhere.dataset() == "train" and "this epoch reads the channel's files again" in notes[0]
