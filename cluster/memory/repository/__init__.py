"""Memory records in SQL (SQLite or Postgres): the source of truth for long-term memory, one module per concern.

- :mod:`.rows`: what the stores take and hand back (:class:`~.rows.StoredMemory`, :class:`~.rows.NewMemory`);
- :mod:`.versions`: an owner's memory versions: written, superseded, read by id, deleted, archived,
  their conversations and activity, and the owner's generation;
- :mod:`.search`: what a query reads: visibility, full-text ranking, the words and names a ranking
  stage needs, the candidates' facts;
- :mod:`.log`: the raw log of observed turns;
- :mod:`.queue`: vector work queued by the transaction that made it.

Each store is made for one owner in one unit of work (``Database.transaction()`` for writes,
``Database.read()`` for queries): every statement carries ``owner = :owner`` with the owner bound
once, when the store is made, from the caller's credential. Stores never commit. ORM rows never
leave this package: callers get :class:`~.rows.StoredMemory` values and give :class:`~.rows.NewMemory` ones.
"""
