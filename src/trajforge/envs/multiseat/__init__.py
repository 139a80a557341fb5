"""Multi-seat games (``base.py``: the contract) and the built-in ones: tic-tac-toe, Kuhn poker
and a two-party negotiation, each with scripted opponents of set strength."""
