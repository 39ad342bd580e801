"""How results are compared: racing cuts a clearly slower configuration's timing short
(``racing.py``), the confirmation's statistics name a winner among candidates timed again on
every device and each device's factor (``confirmation.py``), and with several objectives the
Pareto front keeps what nothing beats on all of them (``pareto.py``)."""
