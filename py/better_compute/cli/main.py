"""`python -m better_compute.cli.main` runs the CLI (the tests use it; users have `better-compute`)."""

from better_compute.cli import main

if __name__ == "__main__":
    main()
