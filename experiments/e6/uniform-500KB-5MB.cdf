# Flow sizes uniform between 500 KB and 5 MB (IRN §4.4.1 (iv): background and storage traffic).
500000 0
5000000 100
