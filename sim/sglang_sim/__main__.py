"""`python -m sglang_sim [serve] <sglang serve flags>`."""

from .launch import main

raise SystemExit(main())
