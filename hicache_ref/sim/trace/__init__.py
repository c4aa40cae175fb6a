"""Request traces: the Mooncake JSONL format read and checked (`reader`), the traces that ship as
package data (`data/`), what a trace asks of a cache (`stats`, `stack_distance`), synthetic traces
(`synth`, `synth_schedule`) and other formats converted (`convert/`). Imports nothing of the rest of sim."""
