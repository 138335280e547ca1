"""The timeline pass of a focused sweep, in its own process (the parent never imports the
user's model): ``python -m torch_nsight.collect.child.first_look JOB OUT_DIR``.

Reads the sweep's job file and runs :func:`torch_nsight.timeline` on every (variant, shape)
of it, writing the timeline directory ``OUT_DIR``.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the job's timeline; 0 when at least one shape was recorded."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m torch_nsight.collect.child.first_look JOB OUT_DIR",
              file=sys.stderr)
        return 2
    from torch_nsight.capture.calls.settings import apply_settings
    from torch_nsight.collect.shared.job import read_job
    from torch_nsight.collect.timeline import timeline

    _, job = read_job(args[0])
    apply_settings(job.settings)
    model = job.variants if list(job.variants) != [""] else job.variants[""]
    timeline(model, dict(job.shapes), make_inputs=job.make_inputs,
             backward=job.backward, dtype=job.dtype, warmup=job.warmup, runs=3, ops=job.ops,
             output_dir=args[1], quiet=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
