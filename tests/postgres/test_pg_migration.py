"""A schema from before `log` was partitioned (versions 1 to 3: one plain table) is
migrated at start: its batches move into the partitioned table and every job is there."""

from __future__ import annotations

import greenstalk


def unpartition(postgres, db: str) -> None:
    """Turns the partitioned `log` back into version 3's plain table, rows and all."""
    postgres.sql(
        "BEGIN;"
        "CREATE TABLE jobyard.log_plain AS SELECT pos, section, records, epoch FROM jobyard.log;"
        "DROP TABLE jobyard.log;"
        "ALTER TABLE jobyard.log_plain RENAME TO log;"
        "ALTER TABLE jobyard.log ADD PRIMARY KEY (pos);"
        "ALTER TABLE jobyard.log ALTER COLUMN epoch SET DEFAULT 0;"
        "CREATE INDEX log_section ON jobyard.log (section);"
        "UPDATE jobyard.meta SET value = '3' WHERE key = 'schema_version';"
        "COMMIT;",
        db=db,
    )


def test_a_version_3_log_is_migrated_into_partitions(start_pg_server, postgres, pg_url):
    db = pg_url.rsplit("/", 1)[1]
    srv = start_pg_server()
    with greenstalk.Client(srv.address) as client:
        ids = {client.put(f"job-{i}"): f"job-{i}" for i in range(50)}
    srv.stop()
    unpartition(postgres, db)
    kind = postgres.sql("SELECT relkind FROM pg_class WHERE oid = 'jobyard.log'::regclass", db=db)
    assert kind == [["r"]], kind
    srv = start_pg_server()
    kind = postgres.sql("SELECT relkind FROM pg_class WHERE oid = 'jobyard.log'::regclass", db=db)
    assert kind == [["p"]], kind
    version = postgres.sql("SELECT value FROM jobyard.meta WHERE key = 'schema_version'", db=db)
    assert version == [["4"]], version
    with greenstalk.Client(srv.address) as client:
        for jid, body in ids.items():
            assert client.peek(jid).body == body
        # And the migrated log takes new batches.
        client.put("after")
    srv.restart(crash=True)
    with greenstalk.Client(srv.address) as client:
        assert client.stats()["current-jobs-ready"] == 51
