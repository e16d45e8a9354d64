"""Search stage: architecture search — TinyNAS (supernet + evolution) and μNAS (aging evolution, every candidate
trained) — on one core (`core.py`): a strategy is a space and a search loop; the resource evaluator (`resources`),
the store (`store`), the worker pool (`parallel`), the training recipe (`kilobyte.train`) and the report path
(`report`) are the same for both.
"""
