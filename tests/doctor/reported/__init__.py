"""Training bugs people reported in public trackers, each reproduced beside its fixed twin.

One module per report: its docstring links the thread and says in one line what goes wrong;
`Buggy` carries the reporter's bug, `Healthy` the reporter's fix, and both are plain Lightning
classes that import nothing from trainwell. tests/doctor/test_reported.py runs the doctor on both.
"""
