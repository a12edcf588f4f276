"""Every script in examples/ runs to the end, checks what it claims, and leaves nothing behind."""

from __future__ import annotations

import collections

import pytest

from grainlite_tests.support.example_runs import run_example
from grainlite_tests.support.pictures import cell_centres, drawn_share, read_png


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_tutorial_script_runs_every_step_and_resumes_at_element_5(tmp_path):
    output = run_example("tutorial.py", "--out", str(tmp_path))
    assert "verified: after the restore, elements 5-9 came again, in the same order" in output
    assert '"version": 2' in output
    assert "InMemoryDataSource(name=gl_" in output
    assert "ReadOptions(num_threads=8, prefetch_buffer_size=500)" in output
    drawn = sorted(p.name for p in tmp_path.glob("element_*.png"))
    assert drawn == [f"element_{i}.png" for i in range(10)]
    pictures = [read_png(tmp_path / name) for name in drawn]
    for picture in pictures:
        assert picture.shape == (200, 200, 3)  # figsize=(2, 2) at 100 dpi
        assert drawn_share(picture) > 0.3  # the picture, not an empty figure
    # The sampler's 5 records over 2 epochs: 5 different pictures, each drawn twice.
    centres = collections.Counter(cell_centres(picture, 1, 1, half=20)[0] for picture in pictures)
    assert sorted(centres.values()) == [2] * 5
    assert sorted(p.name for p in (tmp_path / "orbax" / "5" / "default").iterdir()) == [
        "commit_success.txt",
        "process_0-of-1.json",
    ]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_jax_example_resumes_after_a_crash_exactly_like_an_uninterrupted_run(tmp_path):
    output = run_example(
        "train_jax.py",
        "--steps",
        "16",
        "--save-every",
        "4",
        "--crash-at",
        "11",
        "--workdir",
        str(tmp_path),
    )
    assert "crashed on purpose: simulated crash before step 11 (trained steps 1-10)" in output
    assert "resumed from the checkpoint of step 8 (model + optimizer + loader)" in output
    assert (
        "verified: steps 9-16 of the resumed run trained on the same batches and computed "
        "bit-identical losses as the uninterrupted run" in output
    )
    assert "verified: the final parameters are bit-identical" in output
    assert (tmp_path / "run" / "16" / "loader" / "process_0-of-1.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_demo_trains_crashes_resumes_and_draws_a_batch(tmp_path):
    output = run_example("demo.py", "--out", str(tmp_path))
    assert "read one batch with 2 worker processes" in output
    assert "verified: the final parameters are bit-identical" in output
    assert "verified: no worker process and no shared-memory segment outlived its loader" in output
    png = tmp_path / "batch.png"
    assert f"the batch drawn by show_batch: {png}" in output
    picture = read_png(png)
    assert picture.shape == (960, 880, 3)  # 4 x 4 cells of 2.2 x 2.4 inches at 100 dpi
    assert drawn_share(picture) > 0.5
    # A batch of 16 different pictures: the centre of every cell differs from every other.
    assert len(set(cell_centres(picture, 4, 4))) == 16
