from dlopt.cli import main

raise SystemExit(main())
