"""The export worker (`python -m worker --kind export`): makes job exports' GGUF files, and never imports
torch (numpy, safetensors and `gguf` through `lcsb_core.export`), so it is light enough to run beside
the others or on a small machine.

    tasks.py       TaskName.RUN_EXPORT(export_id): one export, on `Settings.export_queue`
    run.py         claim -> fetch the adapter -> the shipped base GGUF -> `lcsb_core.export` -> upload
    failures.py    what went wrong -> the export's error code and a public message (no path, no trace)
"""
