"""The replay cost benchmark: recorded sessions replayed with each context strategy, every
request billed at Anthropic's prompt-caching prices from the offline stand-in's usage.

    python -m benchmarks.replay [--windows 32000,200000,1000000] [--quick] [--strategies ...]

corpus.py loads the sessions, billing.py meters the stand-in (side_output.py sizes its side-call
replies, identifiers.py reads what each action uses), harness.py is the loop the baselines share
(strategies/), ctx_strategy.py runs ctx_magic's own loop, results.py and table.py make the
figures, cli.py the command.
"""
