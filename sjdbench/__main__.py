from sjdbench.cli import main

main()
