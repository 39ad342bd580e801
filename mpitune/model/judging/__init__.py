"""How results are compared.

Racing cuts a clearly slower configuration's timing short (``racing.py``). The confirmation's
statistics name a winner among candidates timed again on every device (``confirmation.py``).
They also give each device's factor. With several objectives, the Pareto front keeps what
nothing beats on all of them (``pareto.py``)."""
