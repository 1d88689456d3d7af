from unified.eval.cli import main

raise SystemExit(main())
