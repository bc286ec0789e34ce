from resispec_gguf.surfaces.cli import main

raise SystemExit(main())
