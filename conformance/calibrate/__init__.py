"""Link calibration: timed transfers on a backend (`probe`, at the `sizes` asked), what is measured and
the least-squares fits (`measure`), whether a fitted slope is known well enough (`fit_quality`), host
costs (`host_costs`, `slowdown_fit`, `registered_fit`), the shared uplink (`uplink`), an L3 store's link
(`l3_link`), prefill terms from measured TTFTs (`ttft_table`, `prefill_fit`, `prefill_profile`), and the
measured profile written as YAML (`write`); `hicache calibrate` drives them."""
