from resispec_gguf.cli import main

raise SystemExit(main())
