from knowledge_api.cli import main

raise SystemExit(main())
