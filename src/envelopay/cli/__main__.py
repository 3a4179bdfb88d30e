from envelopay.cli.app import main

main()
