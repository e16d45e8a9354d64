"""Report stage: human tables, PNG plots (memory per layer and per block, plans, Pareto fronts) and JSON.

Everything here reads results (profiles, plans, search records) and writes text or files; nothing changes a graph.
Plot modules import matplotlib only when called (it is the optional `plot` extra) and write files atomically.
"""
