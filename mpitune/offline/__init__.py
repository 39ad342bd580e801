"""What is done with a file after (or during) a run. Needs neither MPI nor a GPU.

That is reports, plots, the pandas tables and the exchange with Kernel Tuner's formats."""
