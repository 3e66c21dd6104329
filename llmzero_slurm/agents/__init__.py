"""The agents that steer the search: proposer, early stopper and error analyzer.

Each asks an LLM backend when one is configured and falls back to deterministic heuristics
when there is none or when its answers stay unusable; every answer is validated before it
can reach a job script, and what each agent saw and answered is recorded beside the node.
"""
