"""What is done with a file after (or during) a run: reports, plots, the pandas tables and the exchange
with Kernel Tuner's formats. Needs neither MPI nor a GPU."""
