"""Batch layer over run_pytest.sh: inventory, selection, sharding, one executor, case runs,
the ops_status.csv table and time-based partitions. run_batch.py, partition.py and
ops/gen_inventory.py are thin CLIs over these modules."""
