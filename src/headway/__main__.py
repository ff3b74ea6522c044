from headway.cli import main

main()
