"""Reference HiCache on the HAL: radix tree, pools, controller, write policies and ghost list, trace replay."""
