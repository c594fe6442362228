"""CEC's recovery evaluation (Sebeou & Magoutis, Figs. 6 and 7) on a real broker.

The paper's operator, an average price per item over count windows of 10 on 100,000 items,
writes its results and footprints through CEC to a Kafka partition, a transaction per batch, with
CI = 5 ms in every CP = 100 ms. At the crash point each run reports what the paper plots: the
CEC_CHECK records written, the extent a recovery reads, the time to read and load the eventual
checkpoint (EC-load) and the input bytes the replay needs, for Q = 1, 2, 4 and 8 times the open
windows (Fig. 6) and for U from 125,000 to 1,000,000 tuples (Fig. 7). ``--quick`` runs a tenth
of the items and tuples.
"""
