"""Reference HiCache on the HAL: radix tree, pools, controller, policies, storage, replay."""
