"""Images in the store: bytes kept once per distinct image (by sha256), bodies holding only the
reference, and every read giving the bytes back equal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from image_samples import image_trajectory, png_bytes
from trajforge.errors import StoreError
from trajforge.schema import Evaluator, EvaluatorKind, ImagePart, Score
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore


def _images(path: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(path)
    try:
        return sorted(conn.execute("SELECT sha256, size FROM images"))
    finally:
        conn.close()


def _bodies(path: Path) -> list[bytes]:
    conn = sqlite3.connect(path)
    try:
        return [body for (body,) in conn.execute("SELECT body FROM bodies")]
    finally:
        conn.close()


@pytest.mark.parametrize("compress", [False, True])
def test_a_shared_image_is_stored_once_and_read_back_equal(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "s.db"
    shared, other = png_bytes(1), png_bytes(2)
    a = image_trajectory(shared, task_id="a")
    b = image_trajectory(shared, other, shared, task_id="b")
    with TrajectoryStore(path, compress=compress) as store:
        store.add_many([a, b])
        assert store.get(a.id) == a
        assert store.get(b.id) == b
        assert [t.id for t in store.query(order_by="id")] == sorted([a.id, b.id])
        assert {t.id: t for t in store.iter_query()} == {a.id: a, b.id: b}
    assert _images(path) == sorted(
        [(ImagePart.from_bytes(d).sha256, len(d)) for d in (shared, other)]
    )
    if not compress:  # the bodies refer to the images; their bytes are not in them
        assert all(b"IHDR" not in body and b'"data":null' in body for body in _bodies(path))


def test_rewriting_a_trajectory_keeps_its_images(tmp_path: Path) -> None:
    traj = image_trajectory(png_bytes(5))
    score = Score(name="judge", value=1.0, evaluator=Evaluator(kind=EvaluatorKind.RULE))
    with TrajectoryStore(tmp_path / "s.db") as store:
        store.put(traj)
        store.put(traj)
        store.add_scores(traj.id, [score])
        back = store.get(traj.id)
    assert back.messages[0].images[0].data == png_bytes(5)
    assert back.scores == [score]
    assert _images(tmp_path / "s.db") == [(traj.messages[0].images[0].sha256, len(png_bytes(5)))]


def test_a_reference_to_an_image_the_store_lacks_is_refused(tmp_path: Path) -> None:
    traj = image_trajectory(png_bytes(6))
    part = traj.messages[0].images[0]
    part.data = None
    with TrajectoryStore(tmp_path / "s.db") as store:
        with pytest.raises(StoreError, match=f"image {part.sha256[:12]} has no bytes"):
            store.add(traj)
        assert store.count() == 0
        store.add(image_trajectory(png_bytes(6), task_id="with-bytes"))
        store.add(traj)  # now the store holds the bytes it refers to
        assert store.get(traj.id).messages[0].images[0].data == png_bytes(6)


def test_a_store_from_before_images_gains_the_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with TrajectoryStore(path) as store:
        store.add(synthetic_trajectory(0))
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE images")
    conn.commit()
    conn.close()
    traj = image_trajectory(png_bytes(7))
    with TrajectoryStore(path, create=False) as store:
        assert store.get("synthetic-0000000") == synthetic_trajectory(0)
        store.add(traj)
        assert store.get(traj.id) == traj
    assert len(_images(path)) == 1


@pytest.mark.parametrize("compress", [False, True])
def test_deleting_trajectories_removes_the_images_no_row_refers_to(
    tmp_path: Path, compress: bool
) -> None:
    path = tmp_path / "s.db"
    shared, own = png_bytes(1), png_bytes(2)
    a = image_trajectory(shared, task_id="a")
    b = image_trajectory(shared, own, task_id="b")
    plain = synthetic_trajectory(0)
    with TrajectoryStore(path, compress=compress) as store:
        store.add_many([a, b, plain])
        assert store.delete([b.id, "not-stored"]) == 1
        assert _images(path) == [(ImagePart.from_bytes(shared).sha256, len(shared))]
        assert store.get(a.id).messages[0].images[0].data == shared  # still referenced
        assert store.delete([a.id]) == 1
        assert _images(path) == []
        assert [t.id for t in store.query()] == [plain.id]


def test_a_replaced_trajectory_that_drops_an_image_leaves_no_orphan(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first, second = png_bytes(1), png_bytes(2)
    traj = image_trajectory(first, second)
    with TrajectoryStore(path) as store:
        store.put(traj)
        store.put(image_trajectory(second).model_copy(update={"id": traj.id}))
        assert _images(path) == [(ImagePart.from_bytes(second).sha256, len(second))]
        assert store.get(traj.id).messages[0].images[0].data == second
