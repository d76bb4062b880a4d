"""Background runs: the agent's code run in a thread of the kernel, the board that keeps them,
the watch that notices a stall, and what the agent, `%ctx tasks` and the panel are told of them."""
