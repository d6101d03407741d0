"""Where the chain's tasks go while the data hosts change (`cluster.autoscale.placement.JoinedHosts`)."""

from smlaunch.cluster.autoscale import placement
from smlaunch.cluster.autoscale.placement import NONE_JOINED, JoinedHosts

DATA = {"ray-subcluster": "data"}


def test_the_chain_is_narrowed_to_the_joined_hosts_and_with_none_to_a_node_no_host_has(monkeypatch):
    """Before any list: the plain selector. With hosts: those. With none (`min_data_hosts: 0` over a
    sealed cache): a node id no node has, so no new data host can meet a waiting task (the
    autoscaler started one for the plain selector) and the task goes where its fallback sends it."""
    lists = iter([None, ["n1", "n2"], []])
    monkeypatch.setattr(placement, "published", lambda: next(lists))
    monkeypatch.setattr(placement, "REFRESH_S", 0.0)
    joined = JoinedHosts(DATA, "ray.io/node-id")
    assert joined() == {"label_selector": DATA}
    assert joined() == {"label_selector": {**DATA, "ray.io/node-id": "in(n1,n2)"}}
    assert joined() == {"label_selector": {**DATA, "ray.io/node-id": f"in({NONE_JOINED})"}}


def test_a_list_that_cannot_be_read_keeps_the_last_one(monkeypatch):
    def unreadable():
        raise ConnectionError("GCS away")

    monkeypatch.setattr(placement, "REFRESH_S", 0.0)
    joined = JoinedHosts(DATA, "ray.io/node-id")
    monkeypatch.setattr(placement, "published", lambda: ["n1"])
    assert joined()["label_selector"]["ray.io/node-id"] == "in(n1)"
    monkeypatch.setattr(placement, "published", unreadable)
    assert joined()["label_selector"]["ray.io/node-id"] == "in(n1)"
