"""Capacity planning (``fabricsim plan PLAN.yaml``; docs/planning.md).

One noun per module: :mod:`.model` (the model: presets, parameter counts, FLOPs per token),
:mod:`.spec` (the plan file), :mod:`.layout` (ranks on GPUs, the parallel groups), :mod:`.comm`
(one step's communication as patterns and repeat counts), :mod:`.step` (step time from compute and
exposed communication; calibration), :mod:`.runner` (building the clusters, simulating each distinct
pattern once on the flow engine), :mod:`.output` (the results folder)::

    from fabricsim.plan.spec import load_plan
    from fabricsim.plan.runner import run_plan
    spec, source = load_plan("plans/small_moe.yaml")
    result = run_plan(spec, source)        # result.rows: one dict per cluster size
"""
