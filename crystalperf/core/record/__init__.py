"""What the hooks share while the job runs: sampling Python stacks into bounded tables (``sampling``,
``sampletable``) and spooling them (``samplejournal``), the processes' byte counters (``iocounters``), what a
blocked thread is blocked in (``syscalls``), and never breaking the user's job (``hooks``)."""
