"""Training-step modelling without torch: what a layout costs in memory, compute and communication.

Modules, in the order data flows through them:
  models     the transformer being trained (its shapes and parameter counts; presets)
  model_config  a Hugging Face config.json read into models' shapes, or refused by name; load_model
  hardware   processor, network and system descriptions (presets/*.json, each figure sourced)
  layout     a parallel layout (dp, tp, pp, vpp, cp, ep, ZeRO stage, micro-batch, recompute)
  memory     the per-GPU memory ledger
  compute    FLOPs (C = 6PD) and GEMM time on a processor
  network    the CollectiveCost protocol and PresetNetwork; measured holds MeasuredNetwork
  comm       which collectives each parallelism issues, priced at their size and placement
  cluster    the GPUs, their system, the collective cost and the overlap slowdown
  step       the closed-form step model: per-op costs with overlap, a whole step for many layouts
  schedule   the event schedule of one layout's step (1F1B / interleaved), and its timeline
  planner    enumerate, filter by memory, rank and explain layouts
  spec       PlanSpec (every plan input, validated) and build_planner: the door `plan` and the
             dashboard both use

Everything here works on numpy arrays of layouts so the planner can price thousands at once.
"""
