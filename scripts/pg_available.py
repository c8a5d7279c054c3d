"""Exit 0 when the PostgreSQL server of DATABASE_URL (argument 1) answers, else 1 with the reason."""
from __future__ import annotations

import sys

import dj_database_url
import psycopg


def main() -> int:
    url = sys.argv[1]
    cfg = dj_database_url.parse(url)
    try:
        psycopg.connect(
            host=cfg["HOST"] or "127.0.0.1", port=cfg["PORT"] or 5432, user=cfg["USER"] or "postgres",
            password=cfg["PASSWORD"] or None, dbname="postgres", connect_timeout=3,
        ).close()
    except psycopg.Error as exc:
        print(f"PostgreSQL at {cfg['HOST']}:{cfg['PORT']} is not reachable: {str(exc).strip().splitlines()[0]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
