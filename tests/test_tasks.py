"""The task and grader registries, and task loading by name with options."""
import pytest

from polyvox import grading, tasks
from polyvox.studies.world import problems as world  # noqa: F401 - registers the world task


@pytest.mark.parametrize("name,count,grader", [
    ("math500", 500, "math"), ("aime2024", 30, "aime"), ("aime2025", 30, "aime"), ("aime_panel", 20, "aime"),
    ("math500_slice50", 50, "math"), ("olympiad_heldout", 100, "math"), ("olympiad", 877, "math"),
])
def test_shipped_tasks_load_with_their_grader(root, name, count, grader):
    probs = tasks.load(name, root / "data")
    assert len(probs) == count and len({p.id for p in probs}) == count
    assert tasks.get(name).grader == grader and grader in grading.GRADERS


def test_filters_and_options(root):
    l5 = tasks.load("math500", root / "data", level=5)
    assert len(l5) == 134 and {p.metadata["level"] for p in l5} == {5}
    assert len(tasks.load("math500", root / "data", level=[4, "5"], limit=7)) == 7
    assert [p.id for p in tasks.load("aime_panel", root / "data", ids=["2025_3", "2024_0"])] == ["2024_0", "2025_3"]
    s1 = tasks.load("math500_slice50", root / "data", per_level=2, seed=1)
    assert len(s1) == 10 and s1 != tasks.load("math500_slice50", root / "data", per_level=2, seed=2)


def test_world_task_is_seeded_and_split(root):
    a = tasks.load("world", levels=[1, "olympiad"], per_level=4, seed=3, split="test")
    assert a == tasks.load("world", levels=[1, "olympiad"], per_level=4, seed=3, split="test")
    assert {p.metadata["level"] for p in a} == {1, "olympiad"} and {p.metadata["split"] for p in a} == {"test"}
    assert tasks.get("world").grader == "integer"
    assert [p.metadata["level"] for p in tasks.load("world", levels=[1, 2], per_level=2, level=2)] == [2, 2]


@pytest.mark.parametrize("call,message", [
    (lambda d: tasks.load("chess", d), "unknown task 'chess'; tasks: aime2024"),
    (lambda d: tasks.load("aime_panel", d, level=5), "task aime_panel has no levels"),
    (lambda d: tasks.load("math500", d, per_level=3), "unknown option.* per_level; options: none"),
    (lambda d: tasks.load("math_train", d), "math_train needs .*not shipped"),
])
def test_bad_requests_name_what_is_valid(root, call, message):
    with pytest.raises(ValueError, match=message):
        call(root / "data")


def test_registering_a_name_twice_is_an_error():
    with pytest.raises(ValueError, match="registered twice"):
        tasks.register_task("math500", grader="math")(lambda data_dir: [])
    with pytest.raises(ValueError, match="registered twice"):
        grading.register_grader("integer")(lambda c, g: None)
