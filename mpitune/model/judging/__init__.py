"""How results are compared.

Racing cuts a clearly slower configuration's timing short (``racing.py``). The search's best
and those it cannot tell from them are timed again on every device (``candidates.py``). The
confirmation's statistics name a winner among them (``confirmation.py``).
They also give each device's factor. With several objectives, the Pareto front keeps what
nothing beats on all of them (``pareto.py``)."""
