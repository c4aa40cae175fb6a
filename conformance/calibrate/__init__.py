"""Link calibration: timed transfers on a backend (probe), least-squares fits of the link model
(fit), and the measured profile written as YAML (write); `hicache calibrate` drives them."""
