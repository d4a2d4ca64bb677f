"""The inference worker (`python -m worker --kind inference`): answers chat and completions requests.

    tasks.py       TaskName.GENERATE(request_id): one request, its tokens appended to its stream
    serving.py     per-process engines (one base each, loaded once) and the adapter folders on disk
"""
