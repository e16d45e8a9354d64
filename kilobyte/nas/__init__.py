"""Search stage: architecture search and the resource evaluator it calls (TinyNAS, and what later searches reuse).

`space` holds search spaces as data, `build` turns one architecture into the IR graph and the PyTorch module,
`resources` measures a candidate with the planner's own steps.
"""
