"""The cost model: what moving KV costs, cause by cause (`mechanisms`), prefill compute
(`prefill_model`), net benefit against HiCache off (`cost`), and how sure each figure is: the
profile's parameter ensemble (`uncertainty`) and a figure priced across it (`spread`)."""
