from flashprobe.cli import main

main()
